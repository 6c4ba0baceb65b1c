//! Finding the real HIP runtime: the copy already mapped in the process, never a second one.
//!
//! `dlsym(RTLD_NEXT, ..)` is not used: it returns NULL when the runtime came in as a
//! dependency of an `RTLD_LOCAL` dlopen, which is how every Python extension loads it.
//! Instead the loaded objects are walked (`dl_iterate_phdr`, load order) and the first
//! `libamdhip64` found is opened again with `RTLD_NOLOAD`, which only takes a reference to
//! the copy that is there. Only when no copy is mapped is one loaded: the configured path,
//! else the sonames newest first.

use std::ffi::{CStr, c_int, c_void};
use std::path::PathBuf;

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};

use crate::HipApi;
use crate::elf::Memory;

/// Sonames tried, newest first, when no runtime is mapped yet.
pub const SONAMES: [&str; 3] = ["libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"];

/// File names of the runtime start with this (`libamdhip64.so`, `.so.6`, `.so.6.4.60403`).
pub const FILE_PREFIX: &str = "libamdhip64.so";

/// How the runtime in use was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Already mapped in the process (the normal case).
    Mapped,
    /// Loaded from the path the user configured.
    Configured,
    /// Loaded by soname.
    Soname,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Mapped => "mapped",
            Source::Configured => "configured",
            Source::Soname => "soname",
        }
    }
}

/// An object mapped in this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedObject {
    pub path: String,
    pub base: usize,
}

/// The runtime calls are forwarded to. Its library handle is never closed.
pub struct Runtime {
    pub path: String,
    pub source: Source,
    pub api: HipApi,
    /// Every runtime copy mapped when it was found, in load order (the first is `path`
    /// when `source` is `Mapped`). More than one is a hazard worth a warning.
    pub mapped: Vec<String>,
    _lib: Library,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("path", &self.path)
            .field("source", &self.source)
            .field("mapped", &self.mapped)
            .finish()
    }
}

#[derive(Debug)]
pub enum LocateError {
    /// Nothing mapped and nothing could be loaded; each attempt with its error.
    NotFound(Vec<(String, String)>),
}

impl std::fmt::Display for LocateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LocateError::NotFound(tries) => {
                write!(f, "no HIP runtime is mapped and none could be loaded")?;
                for (what, why) in tries {
                    write!(f, "; {what}: {why}")?;
                }
                Ok(())
            }
        }
    }
}

/// What to look for.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// Loaded when no runtime is mapped (RMCP_HIP_LIBRARY); tried before the sonames.
    pub library: Option<PathBuf>,
    /// Base address of the calling object (the shim): an object there is never taken for
    /// the runtime, whatever its name.
    pub exclude_base: usize,
    /// Only take a mapped copy; never load one.
    pub mapped_only: bool,
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// True when `path` names a HIP runtime file.
pub fn is_runtime_file(path: &str) -> bool {
    basename(path).starts_with(FILE_PREFIX)
}

/// Every object mapped in the process, in load order (`dl_iterate_phdr`). The main program
/// and the vDSO have empty names and are left out.
pub fn mapped_objects() -> Vec<MappedObject> {
    unsafe extern "C" fn collect(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `data` is the `&mut Vec` passed below, alive for the whole walk, and
        // glibc calls this callback synchronously from `dl_iterate_phdr`; `info` points to
        // a valid `dl_phdr_info` for the duration of the call.
        let out = unsafe { &mut *(data as *mut Vec<MappedObject>) };
        // SAFETY: as above, `info` is valid and unaliased for the duration of the call.
        let info = unsafe { &*info };
        if !info.dlpi_name.is_null() {
            // SAFETY: a non-null `dlpi_name` is a NUL-terminated string owned by the loader.
            let name = unsafe { CStr::from_ptr(info.dlpi_name) };
            if !name.to_bytes().is_empty() {
                out.push(MappedObject {
                    path: name.to_string_lossy().into_owned(),
                    base: info.dlpi_addr as usize,
                });
            }
        }
        0
    }
    let mut out: Vec<MappedObject> = Vec::new();
    // SAFETY: the callback only appends to `out`, which outlives the call; it calls no
    // loader function (dlopen inside dl_iterate_phdr would deadlock on the loader lock).
    unsafe {
        libc::dl_iterate_phdr(Some(collect), &mut out as *mut _ as *mut c_void);
    }
    out
}

/// An object mapped in this process as the loader lists it (`dl_iterate_phdr`): where its
/// segments are and where its dynamic section is, what it imports (when asked for:
/// [`mappings_with_imports`]), and whether an address is in it without asking the loader
/// ([`Mapping::contains`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// The name it was opened by; empty for the main program.
    pub name: String,
    pub base: usize,
    /// Its `PT_LOAD` segments in memory, (start, end).
    pub segments: Vec<(usize, usize)>,
    /// Those of them mapped readable.
    readable: Vec<(usize, usize)>,
    /// Its `PT_DYNAMIC` in memory (0: none).
    pub dynamic: usize,
    /// The imports asked for, read during the walk.
    pub imports: Vec<Import>,
}

/// A symbol an object imports (`elf::Dynamic::each_import`), with the GOT slot the loader
/// fills for it and what the slot held when read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Import {
    pub name: String,
    pub slot: usize,
    pub value: usize,
}

/// Every object mapped in the process, in load order, with its segments (the main program
/// and the vDSO included). Takes the loader's list lock; calls no other loader function.
pub fn mappings() -> Vec<Mapping> {
    mappings_with_imports(&|_| false)
}

/// [`mappings`], with each object's imports whose names `wanted` accepts. They are read
/// during the loader's walk, which holds the lock `dlclose` takes to unmap an object, so an
/// object another thread is unloading is never read half unmapped.
pub fn mappings_with_imports(wanted: &dyn Fn(&[u8]) -> bool) -> Vec<Mapping> {
    walk(None, wanted)
}

/// The object loaded at `base`, with its imports whose names `wanted` accepts (as
/// [`mappings_with_imports`], reading no other object's).
pub fn mapping_with_imports(base: usize, wanted: &dyn Fn(&[u8]) -> bool) -> Option<Mapping> {
    walk(Some(base), wanted).into_iter().next()
}

fn walk(only: Option<usize>, wanted: &dyn Fn(&[u8]) -> bool) -> Vec<Mapping> {
    struct Walk<'a> {
        out: Vec<Mapping>,
        only: Option<usize>,
        wanted: &'a dyn Fn(&[u8]) -> bool,
    }
    unsafe extern "C" fn collect(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `data` is the `&mut Walk` passed below, alive for the whole walk, and
        // glibc calls this callback synchronously; `info` is valid for the duration of the
        // call.
        let walk = unsafe { &mut *(data as *mut Walk) };
        // SAFETY: as above.
        let info = unsafe { &*info };
        let name = if info.dlpi_name.is_null() {
            String::new()
        } else {
            // SAFETY: a non-null `dlpi_name` is a NUL-terminated string owned by the loader.
            unsafe { CStr::from_ptr(info.dlpi_name) }
                .to_string_lossy()
                .into_owned()
        };
        let base = info.dlpi_addr as usize;
        if walk.only.is_some_and(|b| b != base) {
            return 0;
        }
        let phdrs: &[libc::Elf64_Phdr] = if info.dlpi_phdr.is_null() {
            &[]
        } else {
            // SAFETY: the loader hands `dlpi_phnum` program headers at `dlpi_phdr`, mapped
            // for as long as the object is (and it is loaded during the walk).
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
        };
        let mut m = Mapping {
            name,
            base,
            segments: Vec::new(),
            readable: Vec::new(),
            dynamic: 0,
            imports: Vec::new(),
        };
        for ph in phdrs {
            let start = base.wrapping_add(ph.p_vaddr as usize);
            match ph.p_type {
                libc::PT_LOAD => {
                    let seg = (start, start.wrapping_add(ph.p_memsz as usize));
                    m.segments.push(seg);
                    if ph.p_flags & libc::PF_R != 0 {
                        m.readable.push(seg);
                    }
                }
                libc::PT_DYNAMIC => m.dynamic = start,
                _ => {}
            }
        }
        let mut imports = Vec::new();
        m.each_import(|name, slot, value| {
            if (walk.wanted)(name) {
                imports.push(Import {
                    name: String::from_utf8_lossy(name).into_owned(),
                    slot,
                    value,
                });
            }
        });
        m.imports = imports;
        walk.out.push(m);
        0
    }
    let mut walk = Walk {
        out: Vec::new(),
        only,
        wanted,
    };
    // SAFETY: the callback only reads the objects the loader lists and appends to `walk`,
    // which outlives the call; it calls no loader function.
    unsafe {
        libc::dl_iterate_phdr(Some(collect), &mut walk as *mut Walk as *mut c_void);
    }
    walk.out
}

impl Mapping {
    /// `addr` is inside one of the object's segments.
    pub fn contains(&self, addr: usize) -> bool {
        self.segments.iter().any(|&(s, e)| addr >= s && addr < e)
    }

    /// Calls `f(name, slot, value)` for each function or data symbol the object imports
    /// (`elf::Dynamic::each_import`): the address of its GOT slot and what the slot holds
    /// now. Reads only the object's own readable segments; called during the loader's walk,
    /// so the object stays mapped.
    fn each_import(&self, mut f: impl FnMut(&[u8], usize, usize)) {
        if self.dynamic == 0 {
            return;
        }
        let mem = Live(&self.readable);
        let Some(d) = crate::elf::Dynamic::read(&mem, self.base, self.dynamic, &self.segments)
        else {
            return;
        };
        d.each_import(&mem, self.base, |name, slot| {
            if let Some(v) = mem.u64_at(slot) {
                f(name, slot, v as usize);
            }
        });
    }
}

/// This process's memory, read only inside the given ranges (an object's readable
/// segments, which stay mapped while it is loaded).
struct Live<'a>(&'a [(usize, usize)]);

impl Live<'_> {
    fn inside(&self, addr: usize, len: usize) -> bool {
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        self.0.iter().any(|&(s, e)| addr >= s && end <= e)
    }
}

impl crate::elf::Memory for Live<'_> {
    fn u64_at(&self, addr: usize) -> Option<u64> {
        if addr % 8 != 0 || !self.inside(addr, 8) {
            return None;
        }
        // SAFETY: the 8 aligned bytes are inside a readable segment of a loaded object;
        // read as an atomic because the loader may write a GOT slot at any time (lazy
        // binding), which is then a race only on the value, never undefined behaviour.
        let v = unsafe { &*(addr as *const std::sync::atomic::AtomicU64) };
        Some(v.load(std::sync::atomic::Ordering::Relaxed))
    }

    fn u8_at(&self, addr: usize) -> Option<u8> {
        if !self.inside(addr, 1) {
            return None;
        }
        // SAFETY: inside a readable segment of a loaded object (string tables are never
        // written after load).
        Some(unsafe { std::ptr::read_volatile(addr as *const u8) })
    }
}

/// The HIP runtime copies mapped now, in load order, excluding the object at `exclude_base`.
pub fn mapped_runtimes(exclude_base: usize) -> Vec<MappedObject> {
    mapped_objects()
        .into_iter()
        .filter(|o| o.base != exclude_base && is_runtime_file(&o.path))
        .collect()
}

/// Base address and path of the object that contains `addr`, from `dladdr`.
pub fn object_of(addr: usize) -> Option<(usize, String)> {
    // SAFETY: Dl_info is plain data (pointers and integers); all-zero is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads `addr` as a number and fills `info`; it returns 0 when the
    // address is in no object, in which case `info` is not used.
    let ok = unsafe { libc::dladdr(addr as *const c_void, &mut info) };
    if ok == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: a non-null dli_fname is a NUL-terminated string owned by the loader.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    Some((info.dli_fbase as usize, name.to_string_lossy().into_owned()))
}

/// The loaded object that contains an address: its link map (glibc's `struct link_map`,
/// which is also what `dlopen` returns for it), its load base and the name it was opened by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadedObject {
    pub link_map: usize,
    pub base: usize,
    pub name: String,
}

/// `dladdr1(addr, RTLD_DL_LINKMAP)`: the loader's answer for `addr` and its link map, or
/// None when no object holds it. Takes the loader's lock.
fn dladdr_link_map(addr: usize) -> Option<(libc::Dl_info, usize)> {
    // SAFETY: Dl_info is plain data (pointers and integers); all-zero is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let mut map: *mut c_void = std::ptr::null_mut();
    // SAFETY: dladdr1 only reads `addr` as a number, fills `info` and, for RTLD_DL_LINKMAP,
    // stores a `struct link_map *` in `map`; 0 means no object, and then neither is used.
    let ok = unsafe {
        libc::dladdr1(
            addr as *const c_void,
            &mut info,
            &mut map as *mut *mut c_void,
            RTLD_DL_LINKMAP,
        )
    };
    (ok != 0 && !map.is_null()).then_some((info, map as usize))
}

/// The object containing `addr` (`dladdr1` with `RTLD_DL_LINKMAP`). Takes the loader's lock;
/// leaves a pending `dlerror()` message alone.
pub fn loaded_object(addr: usize) -> Option<LoadedObject> {
    let (info, link_map) = dladdr_link_map(addr)?;
    let name = if info.dli_fname.is_null() {
        String::new()
    } else {
        // SAFETY: a non-null dli_fname is a NUL-terminated string owned by the loader.
        unsafe { CStr::from_ptr(info.dli_fname) }
            .to_string_lossy()
            .into_owned()
    };
    Some(LoadedObject {
        link_map,
        base: info.dli_fbase as usize,
        name,
    })
}

/// The link map and load base of the object containing `addr` (`dladdr1`), without its
/// name: no allocation. Takes the loader's lock.
pub fn link_map_of(addr: usize) -> Option<(usize, usize)> {
    dladdr_link_map(addr).map(|(info, map)| (map, info.dli_fbase as usize))
}

/// Runs `f` with a `dlsym` handle for `object`, taken with `dlopen(RTLD_NOLOAD)` (nothing is
/// loaded) and released after `f`, so the object's lifetime stays the program's business. A
/// link map from `dladdr1` is not itself a usable handle: glibc builds an object's search
/// list only when it is dlopened. None if the name does not lead back to this very object
/// (another namespace, or a name that now means another file). Clears a pending `dlerror()`
/// message, as every dl* call that can fail does in glibc.
pub fn with_handle<R>(object: &LoadedObject, f: impl FnOnce(*mut c_void) -> R) -> Option<R> {
    with_handle_closed_by(object, libc::dlclose, f)
}

/// `dlclose`'s signature.
pub type DlcloseFn = unsafe extern "C" fn(*mut c_void) -> c_int;

/// [`with_handle`], releasing the handle with `close` (glibc's dlclose, where the caller's
/// own `dlclose` would reach a wrapper that must not see it).
pub fn with_handle_closed_by<R>(
    object: &LoadedObject,
    close: DlcloseFn,
    f: impl FnOnce(*mut c_void) -> R,
) -> Option<R> {
    let name = std::ffi::CString::new(object.name.as_str()).ok()?;
    // The main program has no name: dlopen(NULL) is its handle.
    let name_ptr = if object.name.is_empty() {
        std::ptr::null()
    } else {
        name.as_ptr()
    };
    // SAFETY: RTLD_NOLOAD only takes a reference to an object already loaded; nothing is
    // mapped and no initialiser runs. `name_ptr` is null or NUL-terminated.
    let handle = unsafe { libc::dlopen(name_ptr, libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return None;
    }
    let same = handle as usize == object.link_map;
    let out = same.then(|| f(handle));
    // SAFETY: `handle` came from the dlopen above; this drops only that reference (`close`
    // is a dlclose).
    unsafe { close(handle) };
    out
}

/// `RTLD_DL_LINKMAP` (dlfcn.h), which the libc crate does not name.
const RTLD_DL_LINKMAP: c_int = 2;

/// The link-map namespace of a loaded object (`dlinfo(RTLD_DI_LMID)`): 0 is the base
/// namespace, others come from `dlmopen`. Clears a pending `dlerror()` message, as every
/// dl* call that can fail does in glibc.
pub fn namespace_of(link_map: usize) -> Option<i64> {
    let mut lmid: libc::Lmid_t = 0;
    // SAFETY: `link_map` is a handle the loader gave out (dladdr1); dlinfo writes one
    // Lmid_t for RTLD_DI_LMID.
    let rc = unsafe {
        libc::dlinfo(
            link_map as *mut c_void,
            libc::RTLD_DI_LMID,
            &mut lmid as *mut libc::Lmid_t as *mut c_void,
        )
    };
    (rc == 0).then_some(lmid as i64)
}

fn open(path: &str, flags: c_int) -> Result<Library, String> {
    // SAFETY: opening the HIP runtime runs its initialisers; that is what loading it means
    // and the process asked for HIP by calling a HIP function. With RTLD_NOLOAD nothing is
    // loaded and no initialiser runs.
    unsafe { Library::open(Some(path), flags) }.map_err(|e| e.to_string())
}

fn resolve(lib: &Library) -> HipApi {
    HipApi::resolve(|name| {
        // SAFETY: looking up a symbol's address does not call it; the address is only
        // stored, typed by `HipApi`'s table of C signatures.
        match unsafe { lib.get::<*mut c_void>(name.to_bytes_with_nul()) } {
            Ok(sym) => *sym,
            Err(_) => std::ptr::null_mut(),
        }
    })
}

/// A library is taken for the runtime only if its `hipMalloc` is not in the excluded
/// object (the shim itself, should someone point RMCP_HIP_LIBRARY at it).
fn accept(lib: Library, exclude_base: usize) -> Result<(Library, HipApi, String), String> {
    let api = resolve(&lib);
    let Some(addr) = api.address_of("hipMalloc") else {
        return Err("it does not export hipMalloc".into());
    };
    match object_of(addr) {
        Some((base, _)) if base == exclude_base => Err("it is rmcp's own library".into()),
        Some((_, path)) => Ok((lib, api, path)),
        None => Err("its hipMalloc is in no mapped object".into()),
    }
}

/// Finds the runtime: a mapped copy first, then (unless `mapped_only`) the configured
/// library, then the sonames. Never maps a second copy when one is mapped.
pub fn locate(req: &Request) -> Result<Runtime, LocateError> {
    let mapped = mapped_runtimes(req.exclude_base);
    let mapped_paths: Vec<String> = mapped.iter().map(|o| o.path.clone()).collect();
    let mut tries = Vec::new();
    for obj in &mapped {
        match open(&obj.path, RTLD_NOW | libc::RTLD_NOLOAD)
            .and_then(|lib| accept(lib, req.exclude_base))
        {
            Ok((lib, api, _)) => {
                return Ok(Runtime {
                    path: obj.path.clone(),
                    source: Source::Mapped,
                    api,
                    mapped: mapped_paths,
                    _lib: lib,
                });
            }
            Err(e) => tries.push((obj.path.clone(), e)),
        }
    }
    if !mapped.is_empty() || req.mapped_only {
        // A copy is mapped but could not be used: loading another would put two runtimes
        // in one process, which is worse than anything rmcp could fix.
        return Err(LocateError::NotFound(tries));
    }
    let mut candidates: Vec<(String, Source)> = Vec::new();
    if let Some(p) = &req.library {
        candidates.push((p.to_string_lossy().into_owned(), Source::Configured));
    }
    candidates.extend(SONAMES.iter().map(|s| (s.to_string(), Source::Soname)));
    for (name, source) in candidates {
        match open(&name, RTLD_NOW | RTLD_LOCAL).and_then(|lib| accept(lib, req.exclude_base)) {
            Ok((lib, api, path)) => {
                return Ok(Runtime {
                    path,
                    source,
                    api,
                    mapped: mapped_runtimes(req.exclude_base)
                        .into_iter()
                        .map(|o| o.path)
                        .collect(),
                    _lib: lib,
                });
            }
            Err(e) => tries.push((name, e)),
        }
    }
    Err(LocateError::NotFound(tries))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_file_names() {
        assert!(is_runtime_file("/opt/rocm/lib/libamdhip64.so.6"));
        assert!(is_runtime_file("/site-packages/torch/lib/libamdhip64.so"));
        assert!(is_runtime_file("libamdhip64.so.5.2.21153"));
        assert!(!is_runtime_file("/usr/lib/librmcp_shim.so"));
        assert!(!is_runtime_file("/usr/lib/libamdhip64_fake/libc.so.6"));
        assert!(!is_runtime_file("/lib/libhsa-runtime64.so.1"));
    }

    #[test]
    fn mapped_objects_sees_libc_and_not_a_runtime() {
        let objs = mapped_objects();
        assert!(
            objs.iter()
                .any(|o| basename(&o.path).starts_with("libc.so"))
        );
        assert!(mapped_runtimes(0).is_empty());
    }

    #[test]
    fn this_test_programs_imports_are_read_and_bound_to_libc() {
        // The test executable imports dlsym; once bound (by a call, or at load), its GOT
        // slot holds libc's dlsym, which is what this reader must find.
        // SAFETY: a NUL-terminated name; RTLD_DEFAULT.
        let ours = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"dlsym".as_ptr()) } as usize;
        let maps = mappings_with_imports(&|name| name.starts_with(b"dl"));
        let here = this_test_programs_imports_are_read_and_bound_to_libc as *const () as usize;
        let exe = maps
            .iter()
            .find(|m| m.contains(here))
            .expect("the test program is mapped");
        let mut seen = Vec::new();
        for i in &exe.imports {
            assert!(exe.contains(i.slot), "a GOT slot is in the object");
            seen.push((i.name.clone(), i.value));
        }
        assert!(mappings().iter().all(|m| m.imports.is_empty()));
        assert!(seen.iter().any(|(n, _)| n == "dladdr"), "{seen:?}");
        let dlsym = seen
            .iter()
            .find(|(n, _)| n == "dlsym")
            .expect("dlsym imported");
        assert!(
            crate::elf::bound(dlsym.1, &exe.segments).is_none_or(|v| v == ours),
            "{:#x} {ours:#x}",
            dlsym.1
        );
        assert!(
            maps.iter()
                .any(|m| basename(&m.name).starts_with("libc.so"))
        );
    }

    #[test]
    fn mapped_only_with_nothing_mapped_loads_nothing() {
        let req = Request {
            library: Some(PathBuf::from("libc.so.6")),
            exclude_base: 0,
            mapped_only: true,
        };
        assert!(locate(&req).is_err());
        assert!(mapped_runtimes(0).is_empty());
    }
}
