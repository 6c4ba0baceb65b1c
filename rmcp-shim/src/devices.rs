//! What the shim asks the runtime about its devices, over FFI: the version, the HIP
//! ordinals with their PCI addresses, and the calling thread's current device. Which of
//! them are affected is `rmcp_core::classify`'s answer, not this module's.

use std::ffi::{CStr, c_char, c_int};

use rmcp_sys::{HipApi, PciAddress, error};

/// The most HIP ordinals looked at.
pub(crate) const MAX_DEVICES: usize = 64;

/// hipRuntimeGetVersion, or None if the runtime lacks it or fails.
pub(crate) fn runtime_version(api: &HipApi) -> Option<i32> {
    let f = api.hipRuntimeGetVersion?;
    let mut v: c_int = 0;
    // SAFETY: hipRuntimeGetVersion(int*) writes one int through a valid pointer.
    (unsafe { f(&mut v) } == error::SUCCESS).then_some(v)
}

/// The HIP ordinals and their PCI addresses, as the runtime reports them.
pub(crate) fn ordinals(api: &HipApi) -> Vec<(i32, Option<PciAddress>)> {
    let (Some(count_fn), Some(bus_fn)) = (api.hipGetDeviceCount, api.hipDeviceGetPCIBusId) else {
        return Vec::new();
    };
    let mut n: c_int = 0;
    // SAFETY: hipGetDeviceCount(int*) writes one int through a valid pointer.
    if unsafe { count_fn(&mut n) } != error::SUCCESS {
        return Vec::new();
    }
    (0..n.clamp(0, MAX_DEVICES as c_int))
        .map(|ordinal| {
            let mut buf = [0 as c_char; 64];
            // SAFETY: the buffer is 64 bytes and its length is passed; the runtime writes a
            // NUL-terminated string of at most that length.
            let rc = unsafe { bus_fn(buf.as_mut_ptr(), buf.len() as c_int, ordinal) };
            let pci = (rc == error::SUCCESS)
                .then(|| {
                    // The last byte is forced to NUL in case the runtime did not write one.
                    buf[63] = 0;
                    // SAFETY: buf is NUL-terminated (its last byte at the latest).
                    let s = unsafe { CStr::from_ptr(buf.as_ptr()) };
                    PciAddress::parse(s.to_str().ok()?)
                })
                .flatten();
            (ordinal, pci)
        })
        .collect()
}

/// The calling thread's current HIP device, or None if the runtime cannot say.
pub(crate) fn current(api: &HipApi) -> Option<usize> {
    let get = api.hipGetDevice?;
    let mut d: c_int = -1;
    // SAFETY: hipGetDevice(int*) writes one int through a valid pointer.
    if unsafe { get(&mut d) } != error::SUCCESS {
        return None;
    }
    usize::try_from(d).ok()
}
