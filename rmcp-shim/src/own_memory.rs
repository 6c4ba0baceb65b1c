//! Reading this process's own memory without faulting: [`read`] answers false where any of
//! the bytes is not mapped readable, instead of a SIGSEGV. Used where the shim reads memory
//! it does not own and cannot vouch for: a caller's code object image (`module_load`), a
//! queue and its ring at event time (`dispatches`), a kernel name in a library that may have
//! been unloaded (`launches`).

use std::ffi::c_void;

/// Reads `buf.len()` bytes at `addr` of this process's memory; false (never a fault) where
/// any of them is not mapped readable. Through `process_vm_readv`; where a seccomp filter
/// refuses it (Docker's default profile allows it only with CAP_SYS_PTRACE), through a pipe
/// of the shim's own (`read_through_pipe`).
pub(crate) fn read(addr: usize, buf: &mut [u8]) -> bool {
    if buf.is_empty() {
        return true;
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` describes `buf`, writable for its length; the kernel reads `remote`
    // from this process's address space and fails (EFAULT) where it is not mapped, instead
    // of faulting.
    let got = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if got >= 0 {
        return usize::try_from(got).is_ok_and(|n| n == buf.len());
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EPERM | libc::ENOSYS | libc::EACCES) => through_pipe(addr, buf),
        _ => false,
    }
}

/// [`read`] through a pipe: `write(2)` from the address fails with EFAULT where it is
/// not mapped, where a plain read would fault. One page at a time, so that a write into the
/// empty pipe never blocks. The pipe is the shim's own, closed on return (and on exec).
pub(crate) fn through_pipe(addr: usize, buf: &mut [u8]) -> bool {
    let mut fds = [-1; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return false;
    }
    let mut ok = true;
    for (i, chunk) in buf.chunks_mut(4096).enumerate() {
        let Some(at) = addr.checked_add(i * 4096) else {
            ok = false;
            break;
        };
        // SAFETY: the kernel reads `chunk.len()` bytes at `at` from this process and fails
        // with EFAULT where they are not mapped; `fds[1]` is the pipe created above.
        let wrote = unsafe { libc::write(fds[1], at as *const c_void, chunk.len()) };
        if usize::try_from(wrote).ok() != Some(chunk.len()) {
            ok = false;
            break;
        }
        let mut done = 0;
        while done < chunk.len() {
            // SAFETY: reads into the unfilled rest of `chunk`, from the pipe created above,
            // which holds exactly the bytes written.
            let n = unsafe {
                libc::read(
                    fds[0],
                    chunk[done..].as_mut_ptr().cast(),
                    chunk.len() - done,
                )
            };
            match usize::try_from(n) {
                Ok(n) if n > 0 => done += n,
                _ => break,
            }
        }
        if done != chunk.len() {
            ok = false;
            break;
        }
    }
    // SAFETY: the two descriptors pipe2 created above, closed once.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    ok
}
