//! Who called: is the caller's library exempt (RMCP_EXEMPT)?
//!
//! The caller is the object containing the hook's return address (dladdr). dladdr takes the
//! loader's lock, so each return address is looked up once and remembered in a fixed,
//! lock-free table; a call site seen before costs a hash and an atomic load.

use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

const SLOTS: usize = 512;
const PROBES: usize = 8;

/// `(return address << 1) | exempt`; 0 = empty. User-space addresses fit in 63 bits.
static SEEN: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];

fn slot(addr: usize) -> usize {
    (addr.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % SLOTS
}

/// True when the object at `ret` has a path containing one of `patterns`.
pub(crate) fn is_exempt(ret: usize, patterns: &[String]) -> bool {
    if patterns.is_empty() || ret == 0 || ret >> 63 != 0 {
        return false;
    }
    let start = slot(ret);
    for i in 0..PROBES {
        let v = SEEN[(start + i) % SLOTS].load(Relaxed);
        if v == 0 {
            break;
        }
        if v >> 1 == ret {
            return v & 1 == 1;
        }
    }
    let exempt = object_path_matches(ret, patterns);
    let enc = (ret << 1) | usize::from(exempt);
    for i in 0..PROBES {
        match SEEN[(start + i) % SLOTS].compare_exchange(0, enc, Relaxed, Relaxed) {
            Ok(_) => break,
            Err(v) if v == enc => break,
            Err(_) => continue,
        }
    }
    exempt
}

/// The path of the object containing `addr` contains one of `patterns` (no allocation).
fn object_path_matches(addr: usize, patterns: &[String]) -> bool {
    // SAFETY: Dl_info is plain data (pointers and integers); all-zero is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr reads `addr` as a number only and fills `info`; 0 means no object.
    if unsafe { libc::dladdr(addr as *const libc::c_void, &mut info) } == 0
        || info.dli_fname.is_null()
    {
        return false;
    }
    // SAFETY: a non-null dli_fname is a NUL-terminated string owned by the loader.
    let path = unsafe { CStr::from_ptr(info.dli_fname) }.to_bytes();
    patterns.iter().any(|p| {
        let p = p.as_bytes();
        !p.is_empty() && path.windows(p.len()).any(|w| w == p)
    })
}

/// Path of the object containing `addr`, for log lines.
pub(crate) fn object_name(addr: usize) -> String {
    rmcp_sys::locate::object_of(addr).map_or_else(|| "?".to_string(), |(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_by_substring_of_the_object_path_and_caches() {
        // An address inside libc: `strlen` as a function pointer.
        let addr = libc::strlen as *const () as usize;
        let libc_pat = vec!["libc.so".to_string()];
        let other = vec!["librccl".to_string()];
        assert!(is_exempt(addr, &libc_pat));
        assert!(is_exempt(addr, &libc_pat), "cached answer");
        // An address in this test binary: never libc.
        let own = matches_by_substring_of_the_object_path_and_caches as *const () as usize;
        assert!(!is_exempt(own, &other));
        assert!(!is_exempt(own, &[]));
        assert!(!is_exempt(0, &libc_pat));
        assert!(object_name(addr).contains("libc"));
    }
}
