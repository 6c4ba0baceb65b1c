//! The body, seen from the front: where its file is, mapping and attaching it once, and the
//! one line the front says when it cannot.
//!
//! Where: beside this object's file, symlinks followed, named as this file with "_body"
//! before its ".so" (librmcp_shim.so: librmcp_shim_body.so; a copy installed as libX.so for
//! setuid programs pairs with libX_body.so). The loader's name for this object is used when
//! absolute; a relative one (LD_PRELOAD=./x.so) may no longer hold after a chdir, so then
//! /proc/self/maps says which file the mapping came from.
//!
//! When: every thread that finds the body unattached attaches it itself (dlopen is
//! idempotent, and the loader's lock is recursive, so a call from a constructor running
//! inside another dlopen works), so no thread ever waits here for another.

use core::ffi::{c_char, c_void};
use core::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

use crate::abi::{self, AttachFn, Body, STDERR_CLOSED, STDERR_OPEN};
use crate::sys::{self, Buf, PATH_MAX};
use crate::{FRONT, HOOKS};

const UNTRIED: u32 = 0;
const ATTACHED: u32 = 1;
const FAILED: u32 = 2;

static STATE: AtomicU32 = AtomicU32::new(UNTRIED);
static LOOKUP: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
static VLOOKUP: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
static STATS: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
static BEFORE_FORK: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
static DEEPBIND_SEEN: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

/// The front's one piece of work at load: what descriptor 2 is, so that the body writes to
/// it only while it is still the process's stderr.
pub fn record_stderr() {
    match sys::fstat_id(2) {
        Some((dev, ino)) => {
            FRONT.stderr_dev.store(dev, Ordering::Relaxed);
            FRONT.stderr_ino.store(ino, Ordering::Relaxed);
            FRONT.stderr_state.store(STDERR_OPEN, Ordering::Release);
        }
        None => FRONT.stderr_state.store(STDERR_CLOSED, Ordering::Release),
    }
}

/// One line on stderr, "rmcp: <parts>; HIP calls go through unchanged", unless RMCP_LOG=off
/// or descriptor 2 is no longer what it was at load.
fn say(parts: &[&[u8]]) {
    // SAFETY: the name is NUL-terminated; getenv returns null or a NUL-terminated string
    // of the environment, read at once.
    let log = unsafe { sys::c_bytes(sys::getenv(c"RMCP_LOG".as_ptr())) };
    if log == b"off" {
        return;
    }
    match (FRONT.stderr_at_load(), sys::fstat_id(2)) {
        (Some(Some(then)), Some(now)) if then == now => {}
        _ => return,
    }
    let mut line = Buf::<1024>::new();
    line.push(b"rmcp: ");
    for p in parts {
        line.push(p);
    }
    line.push(b"; HIP calls go through unchanged\n");
    if line.full {
        if let Some(last) = line.bytes.last_mut() {
            *last = b'\n';
        }
    }
    sys::write(2, line.as_bytes());
}

/// The file this object was mapped from (absolute, symlinks followed), into `out`.
fn own_file(loader: &sys::Loader, out: &mut Buf<PATH_MAX>) -> Option<()> {
    let mut info = sys::DlInfo::EMPTY;
    let me = (&raw const FRONT).cast::<c_void>();
    // SAFETY: dladdr reads the loader's tables and fills `info`.
    let found = unsafe { (loader.dladdr)(me, &mut info) } != 0;
    let name = if found {
        // SAFETY: dli_fname is null or the loader's NUL-terminated name for the object,
        // which stays valid while the object is mapped (this one is: we are running in it).
        unsafe { sys::c_bytes(info.dli_fname) }
    } else {
        &[]
    };
    if name.first() == Some(&b'/') {
        let mut resolved = [0u8; PATH_MAX];
        // SAFETY: `info.dli_fname` is NUL-terminated (above); `resolved` has PATH_MAX bytes,
        // as realpath requires.
        let r = unsafe { sys::realpath(info.dli_fname, resolved.as_mut_ptr().cast::<c_char>()) };
        if r.is_null() {
            return None;
        }
        let len = resolved.iter().position(|&b| b == 0)?;
        out.push(resolved.get(..len)?);
        return (!out.full).then_some(());
    }
    maps_file(me as usize, out)
}

/// The file of the mapping that holds `addr`, from /proc/self/maps.
fn maps_file(addr: usize, out: &mut Buf<PATH_MAX>) -> Option<()> {
    let fd = sys::open_read(c"/proc/self/maps")?;
    let mut buf = [0u8; PATH_MAX];
    let mut have = 0usize;
    let mut found = false;
    // A full buffer without a newline (a line longer than PATH_MAX, not a file the front
    // could load from) reads 0 bytes and ends the loop.
    'read: while let Some(free) = buf.get_mut(have..) {
        match sys::read(fd, free) {
            Some(n) if n > 0 => have = have.saturating_add(n).min(buf.len()),
            _ => break,
        }
        // Every whole line in the buffer.
        while let Some(nl) = buf
            .get(..have)
            .and_then(|b| b.iter().position(|&c| c == b'\n'))
        {
            let line = buf.get(..nl).unwrap_or(&[]);
            if let Some(path) = mapping_file(line, addr) {
                out.push(path);
                found = !out.full;
                break 'read;
            }
            buf.copy_within(nl.saturating_add(1)..have, 0);
            have = have.saturating_sub(nl.saturating_add(1));
        }
    }
    sys::close(fd);
    found.then_some(())
}

/// The path of a /proc/self/maps line ("lo-hi perms offset dev inode   path") when its range
/// holds `addr`.
fn mapping_file(line: &[u8], addr: usize) -> Option<&[u8]> {
    let dash = line.iter().position(|&c| c == b'-')?;
    let lo = hex(line.get(..dash)?)?;
    let rest = line.get(dash.saturating_add(1)..)?;
    let hi = hex(rest.get(..rest.iter().position(|&c| c == b' ')?)?)?;
    let slash = line.iter().position(|&c| c == b'/')?;
    (lo <= addr && addr < hi)
        .then(|| line.get(slash..))
        .flatten()
}

/// A hexadecimal number, or None when empty, too long or not hexadecimal.
fn hex(s: &[u8]) -> Option<usize> {
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    s.iter().try_fold(0usize, |n, &c| {
        let d = (c as char).to_digit(16)? as usize;
        Some(n.wrapping_shl(4) | d)
    })
}

/// The body's path: this object's file with "_body" before ".so".
fn body_path(loader: &sys::Loader, out: &mut Buf<PATH_MAX>) -> Option<()> {
    let mut file = Buf::<PATH_MAX>::new();
    own_file(loader, &mut file)?;
    let bytes = file.as_bytes();
    let stem = bytes.strip_suffix(b".so").unwrap_or(bytes);
    out.push(stem);
    out.push(b"_body.so");
    (!out.full).then_some(())
}

/// Maps and attaches the body, once. Whether the body is attached.
pub fn attach() -> bool {
    match STATE.load(Ordering::Acquire) {
        ATTACHED => return true,
        FAILED => return false,
        _ => {}
    }
    let fail = |parts: &[&[u8]]| {
        STATE.store(FAILED, Ordering::Release);
        say(parts);
        false
    };
    let Some(loader) = sys::loader() else {
        return fail(&[b"no dlopen in this process (glibc before 2.34 without libdl.so.2) to load the shim's body"]);
    };
    let mut path = Buf::<PATH_MAX>::new();
    if body_path(&loader, &mut path).is_none() {
        return fail(&[b"cannot tell where librmcp_shim.so was loaded from, to load its body"]);
    }
    let Some(path) = path.as_c_str() else {
        return fail(&[b"cannot tell where librmcp_shim.so was loaded from, to load its body"]);
    };
    crate::prepare_front();

    // SAFETY: `path` is NUL-terminated; dlopen maps the file and runs its initialisers (the
    // body has none of its own).
    let h = unsafe { (loader.dlopen)(path.as_ptr(), sys::RTLD_NOW | sys::RTLD_NODELETE) };
    if h.is_null() {
        // SAFETY: dlerror returns null or the loader's NUL-terminated message.
        let e = unsafe { sys::c_bytes((loader.dlerror)()) };
        return fail(&[
            b"cannot load the body: ",
            if e.is_empty() { path.to_bytes() } else { e },
        ]);
    }
    let glibc = crate::glibc_dlsym();
    // SAFETY: a handle dlopen just returned and a NUL-terminated name.
    let f = unsafe { glibc(h, c"rmcp_shim_attach".as_ptr()) };
    if f.is_null() {
        return fail(&[
            path.to_bytes(),
            b" is not the body this librmcp_shim.so was built with",
        ]);
    }
    // SAFETY: `rmcp_shim_attach` has `AttachFn`'s signature in every body (abi.rs); one from
    // another build is caught by the checks below, which it makes too.
    let f = unsafe { core::mem::transmute::<*mut c_void, AttachFn<HOOKS>>(f) };
    let mut body = core::mem::MaybeUninit::<Body<HOOKS>>::zeroed();
    // SAFETY: the front is the static `FRONT`, filled (prepare_front); `body` is writable
    // memory of a `Body`'s size.
    let rc = unsafe { f(&raw const FRONT, body.as_mut_ptr()) };
    if rc != 0 {
        return fail(&[
            path.to_bytes(),
            b" is not the body this librmcp_shim.so was built with",
        ]);
    }
    // SAFETY: the body filled every field (rc 0), each with a valid value of its type. Read
    // in place: a copy of the struct would be a `memcpy` call, which the front does not link.
    let body = unsafe { body.assume_init_ref() };
    if body.abi != abi::ABI || body.size != Body::<HOOKS>::SIZE || body.hooks as usize != HOOKS {
        return fail(&[
            path.to_bytes(),
            b" is not the body this librmcp_shim.so was built with",
        ]);
    }
    if body.entries.iter().any(|e| e.is_null()) {
        return fail(&[path.to_bytes(), b" lacks a hook"]);
    }
    STATS.store(body.stats as *mut c_void, Ordering::Release);
    BEFORE_FORK.store(body.before_fork as *mut c_void, Ordering::Release);
    DEEPBIND_SEEN.store(body.deepbind_seen as *mut c_void, Ordering::Release);
    VLOOKUP.store(body.vlookup as *mut c_void, Ordering::Release);
    LOOKUP.store(body.lookup as *mut c_void, Ordering::Release);
    for (slot, entry) in crate::ENTRIES.iter().zip(body.entries.iter().copied()) {
        slot.store(entry.cast_mut(), Ordering::Release);
    }
    STATE.store(ATTACHED, Ordering::Release);
    true
}

/// Whether the body is attached.
pub fn attached() -> bool {
    STATE.load(Ordering::Acquire) == ATTACHED
}

/// Whether the body is attached or attaching it has failed: nothing left to try.
pub fn settled() -> bool {
    STATE.load(Ordering::Acquire) != UNTRIED
}

/// Whether attaching the body was tried and failed.
pub fn failed() -> bool {
    STATE.load(Ordering::Acquire) == FAILED
}

/// The body's lookup, once attached.
pub fn lookup() -> Option<abi::LookupFn> {
    let p = LOOKUP.load(Ordering::Acquire);
    // SAFETY: only `attach` stores here: the body's `LookupFn`, from a body that stays
    // mapped (RTLD_NODELETE).
    (!p.is_null()).then(|| unsafe { core::mem::transmute::<*mut c_void, abi::LookupFn>(p) })
}

/// The body's versioned lookup, once attached.
pub fn vlookup() -> Option<abi::VlookupFn> {
    let p = VLOOKUP.load(Ordering::Acquire);
    // SAFETY: as for `lookup`.
    (!p.is_null()).then(|| unsafe { core::mem::transmute::<*mut c_void, abi::VlookupFn>(p) })
}

/// The body's stats function, once attached.
pub fn stats() -> Option<abi::StatsFn> {
    let p = STATS.load(Ordering::Acquire);
    // SAFETY: as for `lookup`.
    (!p.is_null()).then(|| unsafe { core::mem::transmute::<*mut c_void, abi::StatsFn>(p) })
}

/// The body's step before a fork, once attached.
pub fn before_fork() -> Option<extern "C" fn()> {
    let p = BEFORE_FORK.load(Ordering::Acquire);
    // SAFETY: as for `lookup`.
    (!p.is_null()).then(|| unsafe { core::mem::transmute::<*mut c_void, extern "C" fn()>(p) })
}

/// The body's report of libraries loaded with RTLD_DEEPBIND, once attached.
pub fn deepbind_seen() -> Option<extern "C" fn()> {
    let p = DEEPBIND_SEEN.load(Ordering::Acquire);
    // SAFETY: as for `lookup`.
    (!p.is_null()).then(|| unsafe { core::mem::transmute::<*mut c_void, extern "C" fn()>(p) })
}
