//! What the front needs from the system, declared here and nowhere else: the loader's
//! functions (weak references), `getenv` and `realpath` from libc, and five system calls
//! made directly (`openat`, `read`, `write`, `close`, `fstat`), so that the front's one
//! dependency is libc.so.6 and it names no libc symbol newer than glibc 2.3 (the wheel
//! links against glibc 2.28, where `fstat` is not yet a symbol).
//!
//! `dlopen` and `dlclose` are not among them: the front exports its own (front.rs), which
//! reach the next ones through `dlsym(RTLD_NEXT)`.
//!
//! The loader functions are weak undefined references: built against glibc 2.34 or later
//! (cargo on this project's machines) they are libc's; built against older glibc (the
//! wheel: manylinux_2_28, through zig) they live in libdl.so.2, which a weak reference does
//! not make a dependency. The front then binds them to whichever object defines them when
//! the process starts (libc.so.6 on glibc 2.34+, the libdl.so.2 that every program that can
//! dlopen, and every HIP runtime, links before that); where none does, they are null and
//! the front says it cannot load its body. Their addresses are read from the GOT in
//! assembly: to the compiler a function's address is never null, and it would fold a test.
//!
//! Also the few string operations the front needs, on bytes, never panicking.

use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};

/// `Dl_info` (dlfcn.h).
#[repr(C)]
pub struct DlInfo {
    pub dli_fname: *const c_char,
    pub dli_fbase: *mut c_void,
    pub dli_sname: *const c_char,
    pub dli_saddr: *mut c_void,
}

impl DlInfo {
    /// All null, for dladdr to fill.
    pub const EMPTY: DlInfo = DlInfo {
        dli_fname: core::ptr::null(),
        dli_fbase: core::ptr::null_mut(),
        dli_sname: core::ptr::null(),
        dli_saddr: core::ptr::null_mut(),
    };
}

pub const RTLD_LAZY: c_int = 0x1;
pub const RTLD_NOW: c_int = 0x2;
pub const RTLD_NOLOAD: c_int = 0x4;
pub const RTLD_NODELETE: c_int = 0x1000;
/// `RTLD_NEXT`, `(void *)-1`.
pub const RTLD_NEXT: *mut c_void = usize::MAX as *mut c_void;
/// `RTLD_DEFAULT`, `(void *)0`.
pub const RTLD_DEFAULT: *mut c_void = core::ptr::null_mut();
/// `PATH_MAX`.
pub const PATH_MAX: usize = 4096;

pub type DlopenFn = unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void;
pub type DlvsymFn = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char) -> *mut c_void;
pub type DladdrFn = unsafe extern "C" fn(*const c_void, *mut DlInfo) -> c_int;
pub type DlcloseFn = unsafe extern "C" fn(*mut c_void) -> c_int;
pub type DlerrorFn = unsafe extern "C" fn() -> *const c_char;

unsafe extern "C" {
    fn dladdr(addr: *const c_void, info: *mut DlInfo) -> c_int;
    fn dladdr1(
        addr: *const c_void,
        info: *mut DlInfo,
        extra: *mut *mut c_void,
        flags: c_int,
    ) -> c_int;
    fn dlerror() -> *const c_char;
    /// libc's `getenv`, bound lazily (below).
    #[link_name = "rmcp_front_getenv"]
    pub fn getenv(name: *const c_char) -> *const c_char;
    /// libc's `realpath`, bound lazily (below).
    #[link_name = "rmcp_front_realpath"]
    pub fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char;
    /// libc's `__register_atfork` (GLIBC_2.3.2; what `pthread_atfork` calls), bound lazily.
    #[link_name = "rmcp_front_register_atfork"]
    pub fn register_atfork(
        prepare: Option<extern "C" fn()>,
        parent: Option<extern "C" fn()>,
        child: Option<extern "C" fn()>,
        dso: *const c_void,
    ) -> c_int;
    /// libc's `__cxa_atexit`, bound lazily.
    #[link_name = "rmcp_front_cxa_atexit"]
    pub fn cxa_atexit(f: extern "C" fn(*mut c_void), arg: *mut c_void, dso: *const c_void)
    -> c_int;
    /// libc's `dl_iterate_phdr`, bound lazily.
    #[link_name = "rmcp_front_dl_iterate_phdr"]
    pub fn dl_iterate_phdr(
        callback: extern "C" fn(*const DlPhdrInfo, usize, *mut c_void) -> c_int,
        data: *mut c_void,
    ) -> c_int;
}

/// The start of `struct dl_phdr_info` (link.h): all the front reads.
#[repr(C)]
pub struct DlPhdrInfo {
    pub dlpi_addr: usize,
    pub dlpi_name: *const c_char,
}

// What a process pays for at load is what the loader binds then. Rust calls external
// functions through the GOT, which the loader fills at load, one symbol lookup each; C calls
// them through the PLT, bound on first call. The front calls libc only on paths a process
// without HIP never takes, so:
// - `getenv`, `realpath`, `__register_atfork`, `__cxa_atexit` and `dl_iterate_phdr` are
//   reached through PLT jumps, bound on first use;
// - the four functions the compiler itself calls (`memset`, `memmove`, `bcmp`, `strlen`)
//   are defined here, hidden, so nothing binds them at all. They are plain string
//   instructions: the front's uses are a few kilobytes at most, on cold paths.
core::arch::global_asm!(
    ".pushsection .text",
    ".globl rmcp_front_getenv",
    ".hidden rmcp_front_getenv",
    ".type rmcp_front_getenv, @function",
    "rmcp_front_getenv:",
    "jmp getenv@PLT",
    ".globl rmcp_front_realpath",
    ".hidden rmcp_front_realpath",
    ".type rmcp_front_realpath, @function",
    "rmcp_front_realpath:",
    "jmp realpath@PLT",
    ".globl rmcp_front_register_atfork",
    ".hidden rmcp_front_register_atfork",
    ".type rmcp_front_register_atfork, @function",
    "rmcp_front_register_atfork:",
    "jmp __register_atfork@PLT",
    ".globl rmcp_front_cxa_atexit",
    ".hidden rmcp_front_cxa_atexit",
    ".type rmcp_front_cxa_atexit, @function",
    "rmcp_front_cxa_atexit:",
    "jmp __cxa_atexit@PLT",
    ".globl rmcp_front_dl_iterate_phdr",
    ".hidden rmcp_front_dl_iterate_phdr",
    ".type rmcp_front_dl_iterate_phdr, @function",
    "rmcp_front_dl_iterate_phdr:",
    "jmp dl_iterate_phdr@PLT",
    // void *memset(void *d, int c, size_t n)
    ".globl memset",
    ".hidden memset",
    ".type memset, @function",
    // Eight bytes at a time, then the rest (valgrind counts each repetition of a string
    // instruction, and the front zeroes a few page-sized buffers on its first call).
    "memset:",
    "mov r8, rdi",
    "movzx eax, sil",
    "mov r9, 0x0101010101010101",
    "imul rax, r9",
    "mov rcx, rdx",
    "shr rcx, 3",
    "rep stosq",
    "mov rcx, rdx",
    "and rcx, 7",
    "rep stosb",
    "mov rax, r8",
    "ret",
    // void *memmove(void *d, const void *s, size_t n): forwards unless d overlaps s from
    // above, then backwards.
    ".globl memmove",
    ".hidden memmove",
    ".type memmove, @function",
    "memmove:",
    "mov rax, rdi",
    "mov rcx, rdx",
    "cmp rdi, rsi",
    "jbe 2f",
    "lea r8, [rsi + rdx]",
    "cmp rdi, r8",
    "jae 2f",
    "lea rdi, [rdi + rdx - 1]",
    "lea rsi, [rsi + rdx - 1]",
    "std",
    "rep movsb",
    "cld",
    "ret",
    "2:",
    "rep movsb",
    "ret",
    // int bcmp(const void *a, const void *b, size_t n): 0 when equal.
    ".globl bcmp",
    ".hidden bcmp",
    ".type bcmp, @function",
    "bcmp:",
    "xor eax, eax",
    "mov rcx, rdx",
    "repe cmpsb",
    "setne al",
    "ret",
    // size_t strlen(const char *s)
    ".globl strlen",
    ".hidden strlen",
    ".type strlen, @function",
    "strlen:",
    "mov rdx, rdi",
    "xor eax, eax",
    "mov rcx, -1",
    "repne scasb",
    "sub rdi, rdx",
    "lea rax, [rdi - 1]",
    "ret",
    ".popsection",
);

core::arch::global_asm!(".weak dladdr", ".weak dladdr1", ".weak dlerror");

/// The address a weak reference resolved to (0 when nothing defines it), read from the GOT.
macro_rules! weak_address {
    ($f:ident) => {{
        let p: usize;
        // SAFETY: loads one word, the GOT slot the linker made for `$f`; no other effect.
        unsafe {
            core::arch::asm!(
                "mov {p}, qword ptr [rip + {f}@GOTPCREL]",
                p = out(reg) p,
                f = sym $f,
                options(pure, readonly, nostack, preserves_flags),
            );
        }
        p
    }};
}

/// The loader's functions the front calls, when the process has them all (and `dlvsym`).
#[derive(Clone, Copy)]
pub struct Loader {
    pub dlopen: DlopenFn,
    pub dladdr: DladdrFn,
    pub dlerror: DlerrorFn,
}

/// The loader's functions, or None when one of them is defined by no object in the process.
pub fn loader() -> Option<Loader> {
    let dlopen = crate::next_dlopen()?;
    let addrs = [weak_address!(dladdr), weak_address!(dlerror)];
    if addrs.contains(&0) || dlvsym_fn().is_none() {
        return None;
    }
    // SAFETY: each address is non-null and is the definition the loader bound to the
    // declaration above, which has the C signature of glibc's function of that name; a
    // function pointer and a `usize` have the same size and representation here.
    unsafe {
        use core::mem::transmute;
        Some(Loader {
            dlopen,
            dladdr: transmute::<usize, DladdrFn>(addrs[0]),
            dlerror: transmute::<usize, DlerrorFn>(addrs[1]),
        })
    }
}

/// glibc's own `dlvsym`, for finding glibc's dlsym. The front exports `dlvsym` itself, so a
/// reference by that name would bind to the front's: it is read instead from the dynamic
/// symbol table of the object that defines `dlerror` (which the front does not export):
/// libc.so.6 since glibc 2.34, libdl.so.2 before, where dlvsym lives too. Found once.
pub fn dlvsym_fn() -> Option<DlvsymFn> {
    static FOUND: AtomicUsize = AtomicUsize::new(0);
    const NONE: usize = 1;
    let mut p = FOUND.load(Ordering::Acquire);
    if p == 0 {
        p = glibc_dlvsym().unwrap_or(NONE);
        FOUND.store(p, Ordering::Release);
    }
    // SAFETY: `p` is the address of glibc's `dlvsym` (its dynamic symbol's value plus the
    // object's base), a function of `DlvsymFn`'s signature.
    (p != NONE).then(|| unsafe { core::mem::transmute::<usize, DlvsymFn>(p) })
}

/// `dlvsym` in the object that defines `dlerror`.
fn glibc_dlvsym() -> Option<usize> {
    let (anchor, dladdr) = (weak_address!(dlerror), weak_address!(dladdr));
    if anchor == 0 || dladdr == 0 {
        return None;
    }
    // SAFETY: as in `loader`: glibc's dladdr, of this signature.
    let dladdr = unsafe { core::mem::transmute::<usize, DladdrFn>(dladdr) };
    let mut info = DlInfo::EMPTY;
    // SAFETY: dladdr reads the loader's tables and fills `info`.
    if unsafe { dladdr(anchor as *const c_void, &mut info) } == 0 || info.dli_fbase.is_null() {
        return None;
    }
    // SAFETY: the base of an object the loader has mapped (it holds glibc's dlerror, which
    // is never unloaded): its ELF header, program headers and dynamic section are mapped.
    unsafe { elf_lookup(info.dli_fbase as usize, b"dlvsym") }
}

/// A word of type `T` at `addr`.
///
/// # Safety
/// `addr` is mapped and readable for `size_of::<T>()` bytes.
unsafe fn at<T: Copy>(addr: usize) -> T {
    // SAFETY: the caller's contract; unaligned reads ask nothing of `addr`'s alignment.
    unsafe { core::ptr::read_unaligned(addr as *const T) }
}

/// The address of the defined dynamic symbol `name` of the x86-64 ELF object loaded at
/// `base`, found through its GNU hash table, or by a scan of its symbols when it has only
/// the SysV one.
///
/// # Safety
/// `base` is the load base of a mapped object whose headers and dynamic section are intact.
unsafe fn elf_lookup(base: usize, name: &[u8]) -> Option<usize> {
    const PT_DYNAMIC: u32 = 2;
    const DT_STRTAB: i64 = 5;
    const DT_SYMTAB: i64 = 6;
    const DT_HASH: i64 = 4;
    const DT_GNU_HASH: i64 = 0x6fff_fef5;
    // A dynamic entry's address: glibc relocates these in place, other loaders do not.
    let addr = |v: usize| if v < base { base.wrapping_add(v) } else { v };
    // SAFETY: every read below is within the mapped headers, dynamic section, hash table,
    // symbol table and string table of the object, as their own fields describe them.
    unsafe {
        let phoff = at::<u64>(base.wrapping_add(32)) as usize;
        let phentsize = at::<u16>(base.wrapping_add(54)) as usize;
        let phnum = at::<u16>(base.wrapping_add(56)) as usize;
        let mut dynamic = 0usize;
        for i in 0..phnum {
            let ph = base
                .wrapping_add(phoff)
                .wrapping_add(i.wrapping_mul(phentsize));
            if at::<u32>(ph) == PT_DYNAMIC {
                dynamic = base.wrapping_add(at::<u64>(ph.wrapping_add(16)) as usize);
                break;
            }
        }
        if dynamic == 0 {
            return None;
        }
        let (mut strtab, mut symtab, mut gnu_hash, mut hash) = (0usize, 0usize, 0usize, 0usize);
        let mut entry = dynamic;
        loop {
            let tag = at::<i64>(entry);
            let value = at::<u64>(entry.wrapping_add(8)) as usize;
            match tag {
                0 => break,
                DT_STRTAB => strtab = addr(value),
                DT_SYMTAB => symtab = addr(value),
                DT_GNU_HASH => gnu_hash = addr(value),
                DT_HASH => hash = addr(value),
                _ => {}
            }
            entry = entry.wrapping_add(16);
        }
        if strtab == 0 || symtab == 0 {
            return None;
        }
        // Symbol `i`'s address when it is `name`, defined.
        let defined = |i: usize| {
            let sym = symtab.wrapping_add(i.wrapping_mul(24));
            let st_name = at::<u32>(sym) as usize;
            let st_shndx = at::<u16>(sym.wrapping_add(6));
            let st_value = at::<u64>(sym.wrapping_add(8)) as usize;
            (st_shndx != 0 && st_value != 0 && c_bytes_eq(strtab.wrapping_add(st_name), name))
                .then(|| base.wrapping_add(st_value))
        };
        if gnu_hash == 0 {
            // Only the SysV table: its second word is the number of symbols; a scan.
            if hash == 0 {
                return None;
            }
            let count = at::<u32>(hash.wrapping_add(4)) as usize;
            return (1..count.min(1 << 20)).find_map(defined);
        }
        let h = name
            .iter()
            .fold(5381u32, |h, &c| h.wrapping_mul(33).wrapping_add(c as u32));
        let nbuckets = at::<u32>(gnu_hash) as usize;
        let symoffset = at::<u32>(gnu_hash.wrapping_add(4)) as usize;
        let bloom_size = at::<u32>(gnu_hash.wrapping_add(8)) as usize;
        if nbuckets == 0 {
            return None;
        }
        let buckets = gnu_hash
            .wrapping_add(16)
            .wrapping_add(bloom_size.wrapping_mul(8));
        let chains = buckets.wrapping_add(nbuckets.wrapping_mul(4));
        let bucket = (h as usize).checked_rem(nbuckets)?;
        let mut i = at::<u32>(buckets.wrapping_add(bucket.wrapping_mul(4))) as usize;
        if i < symoffset {
            return None;
        }
        // A chain ends at an entry with bit 0 set; the bound only guards a corrupt table.
        for _ in 0..(1usize << 20) {
            let ch = at::<u32>(chains.wrapping_add(i.wrapping_sub(symoffset).wrapping_mul(4)));
            if ch | 1 == h | 1 {
                if let Some(p) = defined(i) {
                    return Some(p);
                }
            }
            if ch & 1 != 0 {
                break;
            }
            i = i.wrapping_add(1);
        }
        None
    }
}

/// Whether the NUL-terminated string at `addr` is `name`.
///
/// # Safety
/// `addr` points to a NUL-terminated string.
unsafe fn c_bytes_eq(addr: usize, name: &[u8]) -> bool {
    for (k, &c) in name.iter().enumerate() {
        // SAFETY: the caller's contract: every byte up to the NUL is readable, and a
        // mismatch (the NUL included) stops the loop before reading past it.
        if unsafe { at::<u8>(addr.wrapping_add(k)) } != c {
            return false;
        }
    }
    // SAFETY: as above: the string is at least `name.len()` bytes long.
    unsafe { at::<u8>(addr.wrapping_add(name.len())) == 0 }
}

/// `RTLD_DL_LINKMAP` (dlfcn.h).
const RTLD_DL_LINKMAP: c_int = 2;

/// The link map of the object holding `addr` (`dladdr1`), or null.
pub fn link_map_of(addr: usize) -> *mut c_void {
    let p = weak_address!(dladdr1);
    if p == 0 {
        return core::ptr::null_mut();
    }
    type Dladdr1Fn =
        unsafe extern "C" fn(*const c_void, *mut DlInfo, *mut *mut c_void, c_int) -> c_int;
    // SAFETY: as in `loader`: glibc's dladdr1, of this signature.
    let dladdr1 = unsafe { core::mem::transmute::<usize, Dladdr1Fn>(p) };
    let mut info = DlInfo::EMPTY;
    let mut map = core::ptr::null_mut();
    // SAFETY: dladdr1 reads the loader's tables, fills `info` and, for RTLD_DL_LINKMAP,
    // stores a `struct link_map *` in `map`; `addr` is only compared.
    let ok = unsafe { dladdr1(addr as *const c_void, &mut info, &mut map, RTLD_DL_LINKMAP) };
    if ok == 0 { core::ptr::null_mut() } else { map }
}

/// Whether a live link map's `l_name` (glibc's `struct link_map` starts `l_addr`, `l_name`)
/// is a non-empty string: every object's but the main program's.
pub fn link_map_named(map: *mut c_void) -> bool {
    // SAFETY: `map` is a live link map (the callers' contract); its second word is
    // `l_name`, null or a NUL-terminated string the loader owns.
    let name = unsafe { *map.cast::<*const u8>().wrapping_add(1) };
    // SAFETY: as above.
    !name.is_null() && unsafe { *name } != 0
}

// ---- system calls (x86-64 Linux numbers) --------------------------------------------------

const SYS_READ: usize = 0;
const SYS_WRITE: usize = 1;
const SYS_CLOSE: usize = 3;
const SYS_FSTAT: usize = 5;
const SYS_OPENAT: usize = 257;
const AT_FDCWD: isize = -100;
const O_RDONLY_CLOEXEC: usize = 0o2000000;

/// A system call with three arguments; the kernel's return value (negative errno on error).
///
/// # Safety
/// The arguments are what system call `nr` expects; memory they point to is valid for it.
unsafe fn syscall3(nr: usize, a: usize, b: usize, c: usize) -> isize {
    // SAFETY: the caller's contract; a three-argument system call ignores the fourth
    // register.
    unsafe { syscall4(nr, a, b, c, 0) }
}

/// `struct stat` on x86-64 (144 bytes); only `st_dev` and `st_ino` are read.
#[repr(C)]
struct Stat {
    st_dev: u64,
    st_ino: u64,
    rest: [u64; 16],
}

/// (dev, ino) of descriptor `fd`, or None when it is not open.
pub fn fstat_id(fd: c_int) -> Option<(u64, u64)> {
    let mut st = Stat {
        st_dev: 0,
        st_ino: 0,
        rest: [0; 16],
    };
    // SAFETY: fstat writes one `struct stat` (144 bytes on x86-64) to the pointer.
    let r = unsafe { syscall3(SYS_FSTAT, fd as usize, (&raw mut st) as usize, 0) };
    (r == 0).then_some((st.st_dev, st.st_ino))
}

/// A system call with four arguments (`r10` carries the fourth); the kernel's return value
/// (negative errno on error).
///
/// # Safety
/// The arguments are what system call `nr` expects; memory they point to is valid for it.
unsafe fn syscall4(nr: usize, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY: the `syscall` instruction clobbers rcx and r11 (declared) and touches only
    // the memory the caller's arguments describe (the caller's contract).
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") nr as isize => ret,
            in("rdi") a,
            in("rsi") b,
            in("rdx") c,
            in("r10") d,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

const SYS_POLL: usize = 7;
const SYS_RT_SIGPROCMASK: usize = 14;
const SYS_RT_SIGPENDING: usize = 127;
const SYS_RT_SIGTIMEDWAIT: usize = 128;
const SIG_BLOCK: usize = 0;
const SIG_SETMASK: usize = 2;
/// SIGPIPE (13) in a kernel signal set.
const SIGPIPE_SET: u64 = 1 << (13 - 1);
const EPIPE: isize = 32;
const POLLOUT: i16 = 4;

/// Writes as much of `buf` as one `write(2)` takes, to `fd`, as a guest (issue 30): not at
/// all if `fd` has no room within 100 ms, and never raising SIGPIPE (blocked on this thread
/// for the write; one the write raised, not pending before, is consumed).
pub fn write(fd: c_int, buf: &[u8]) {
    #[repr(C)]
    struct PollFd {
        fd: c_int,
        events: i16,
        revents: i16,
    }
    let mut p = PollFd {
        fd,
        events: POLLOUT,
        revents: 0,
    };
    // SAFETY: one pollfd, valid for the call.
    if unsafe { syscall3(SYS_POLL, (&raw mut p) as usize, 1, 100) } == 0 {
        return;
    }
    let pipe = SIGPIPE_SET;
    let mut old = 0u64;
    let mut pending = 0u64;
    // SAFETY: kernel signal sets of 8 bytes, valid for the calls; the mask is this
    // thread's and is restored below; the zero timeout makes sigtimedwait return at once.
    unsafe {
        syscall4(
            SYS_RT_SIGPROCMASK,
            SIG_BLOCK,
            (&raw const pipe) as usize,
            (&raw mut old) as usize,
            8,
        );
        syscall3(SYS_RT_SIGPENDING, (&raw mut pending) as usize, 8, 0);
        let r = syscall3(SYS_WRITE, fd as usize, buf.as_ptr() as usize, buf.len());
        if r == -EPIPE && pending & SIGPIPE_SET == 0 {
            let zero = [0i64; 2];
            syscall4(
                SYS_RT_SIGTIMEDWAIT,
                (&raw const pipe) as usize,
                0,
                (&raw const zero) as usize,
                8,
            );
        }
        syscall4(
            SYS_RT_SIGPROCMASK,
            SIG_SETMASK,
            (&raw const old) as usize,
            0,
            8,
        );
    }
}

/// `openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC)`: the descriptor, or None.
pub fn open_read(path: &core::ffi::CStr) -> Option<c_int> {
    // SAFETY: `path` is NUL-terminated and valid for reads.
    let r = unsafe {
        syscall3(
            SYS_OPENAT,
            AT_FDCWD as usize,
            path.as_ptr() as usize,
            O_RDONLY_CLOEXEC,
        )
    };
    (r >= 0).then_some(r as c_int)
}

/// `read(2)` into `buf`: the byte count, 0 at the end, None on error.
pub fn read(fd: c_int, buf: &mut [u8]) -> Option<usize> {
    // SAFETY: `buf` is valid for writes of its length.
    let r = unsafe { syscall3(SYS_READ, fd as usize, buf.as_mut_ptr() as usize, buf.len()) };
    (r >= 0).then_some(r as usize)
}

/// `close(2)`.
pub fn close(fd: c_int) {
    // SAFETY: closes a descriptor the front opened itself.
    unsafe { syscall3(SYS_CLOSE, fd as usize, 0, 0) };
}

// ---- bytes -----------------------------------------------------------------------------------

/// The bytes of the NUL-terminated string at `p` (without the NUL), or `&[]` for null.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that outlives the slice.
pub unsafe fn c_bytes<'a>(p: *const c_char) -> &'a [u8] {
    if p.is_null() {
        return &[];
    }
    // SAFETY: the caller's contract: a NUL-terminated string.
    unsafe { core::ffi::CStr::from_ptr(p) }.to_bytes()
}

/// A fixed-size byte buffer that is filled from the front and never overflows: what does
/// not fit is dropped, and `full` says so.
pub struct Buf<const N: usize> {
    pub bytes: [u8; N],
    pub len: usize,
    pub full: bool,
}

impl<const N: usize> Buf<N> {
    pub const fn new() -> Self {
        Buf {
            bytes: [0; N],
            len: 0,
            full: false,
        }
    }

    /// Appends `s`, or as much of it as fits.
    pub fn push(&mut self, s: &[u8]) {
        for &b in s {
            match self.bytes.get_mut(self.len) {
                Some(slot) => {
                    *slot = b;
                    self.len += 1;
                }
                None => {
                    self.full = true;
                    return;
                }
            }
        }
    }

    /// What was written.
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or(&[])
    }

    /// What was written, NUL-terminated, when it fits with its NUL and holds no NUL.
    pub fn as_c_str(&mut self) -> Option<&core::ffi::CStr> {
        // Not `contains`: it calls core's memchr, which the front does not link (build.rs).
        #[allow(clippy::manual_contains)]
        if self.full || self.as_bytes().iter().any(|&b| b == 0) {
            return None;
        }
        *self.bytes.get_mut(self.len)? = 0;
        // SAFETY: the bytes up to `len` hold no NUL and the byte at `len` is one; the
        // string borrows `self`.
        Some(unsafe { core::ffi::CStr::from_ptr(self.bytes.as_ptr().cast()) })
    }
}
