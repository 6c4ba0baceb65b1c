//! The HIP ABI surface rmcp depends on, and the locator of the real runtime.
//!
//! Everything here is a fact about AMD's HIP runtime (`libamdhip64`), checked against
//! ROCm/clr `hipamd/src/hip_memory.cpp` and `include/hip/hip_runtime_api.h`; nothing here
//! is rmcp policy. Values are identical in every runtime from 5.0 to 7.x unless noted.

use std::ffi::{CStr, c_char, c_int, c_void};

pub mod elf;
pub mod locate;

/// `hipError_t`: every HIP entry point returns one.
pub type HipError = c_int;

/// Error codes (`hipError_t`), same values 5.0 to 7.x.
pub mod error {
    use super::HipError;
    pub const SUCCESS: HipError = 0;
    pub const INVALID_VALUE: HipError = 1;
    /// Also spelled `hipErrorMemoryAllocation`.
    pub const OUT_OF_MEMORY: HipError = 2;
    pub const NOT_INITIALIZED: HipError = 3;
    pub const INSUFFICIENT_DRIVER: HipError = 35;
    pub const NO_DEVICE: HipError = 100;
    pub const INVALID_DEVICE: HipError = 101;
    pub const SHARED_OBJECT_SYMBOL_NOT_FOUND: HipError = 302;
    pub const NOT_FOUND: HipError = 500;
    pub const NOT_SUPPORTED: HipError = 801;
    pub const UNKNOWN: HipError = 999;
}

/// `hipHostMalloc` flags.
pub mod host_malloc {
    pub const DEFAULT: u32 = 0x0;
    pub const PORTABLE: u32 = 0x1;
    pub const MAPPED: u32 = 0x2;
    pub const WRITE_COMBINED: u32 = 0x4;
    /// 7.x only.
    pub const UNCACHED: u32 = 0x1000_0000;
    pub const NUMA_USER: u32 = 0x2000_0000;
    pub const COHERENT: u32 = 0x4000_0000;
    pub const NON_COHERENT: u32 = 0x8000_0000;
    /// Every bit any released runtime gives a meaning to.
    pub const KNOWN: u32 =
        PORTABLE | MAPPED | WRITE_COMBINED | UNCACHED | NUMA_USER | COHERENT | NON_COHERENT;
}

/// `hipHostAlloc` flags (`hipHostAlloc*` aliases of the `hipHostMalloc*` values).
pub mod host_alloc {
    pub const PORTABLE: u32 = super::host_malloc::PORTABLE;
    pub const MAPPED: u32 = super::host_malloc::MAPPED;
    pub const WRITE_COMBINED: u32 = super::host_malloc::WRITE_COMBINED;
    /// The flags a runtime that validates them accepts (7.x adds Uncached).
    pub const VALID: u32 = PORTABLE | MAPPED | WRITE_COMBINED;
}

/// `hipExtMallocWithFlags` flags: exact values, never OR'd together.
pub mod device_malloc {
    pub const DEFAULT: u32 = 0;
    pub const FINEGRAINED: u32 = 1;
    pub const SIGNAL_MEMORY: u32 = 2;
    pub const UNCACHED: u32 = 3;
    pub const CONTIGUOUS: u32 = 4;
}

/// `hipHostRegister` flags.
pub mod host_register {
    pub const DEFAULT: u32 = 0;
    pub const PORTABLE: u32 = 1;
    pub const MAPPED: u32 = 2;
    pub const IO_MEMORY: u32 = 4;
    pub const READ_ONLY: u32 = 8;
    /// 7.x's name for 0x8; accepted and ignored on Linux by 7.2.4 (docs/compat.md).
    pub const EXT_COARSE_GRAINED: u32 = 8;
    /// 7.x.
    pub const EXT_UNCACHED: u32 = 0x8000_0000;
}

/// `hipMemCreate`'s `hipMemAllocationProp` (hip_runtime_api.h): `type` (int), the requested
/// handle type (int), then `location` = { `hipMemLocationType type`, `int id` }, from 5.x to
/// 7.x.
pub mod mem_alloc_prop {
    /// Byte offset of `location.type`.
    pub const LOCATION_TYPE_OFFSET: usize = 8;
}

/// `hipMemLocationType`. Up to 6.4 only Device exists; 7.x's driver_types.h adds the host
/// ones (7.2.4's hipMemCreate accepts Host, not the NUMA ones).
pub mod mem_location {
    pub const DEVICE: i32 = 1;
    pub const HOST: i32 = 2;
    pub const HOST_NUMA: i32 = 3;
    pub const HOST_NUMA_CURRENT: i32 = 4;
}

/// `hipMallocManaged` flags.
pub mod mem_attach {
    pub const GLOBAL: u32 = 1;
    pub const HOST: u32 = 2;
    pub const SINGLE: u32 = 4;
}

/// The value `hipRuntimeGetVersion` reports: `major * 10_000_000 + minor * 100_000 + patch`
/// (`HIP_VERSION` in `hip_version.h`; the patch is a build number, not the ROCm point release).
pub const fn hip_version(major: u32, minor: u32) -> i32 {
    (major * 10_000_000 + minor * 100_000) as i32
}

/// Splits a `hipRuntimeGetVersion` value into (major, minor, patch).
pub const fn split_hip_version(v: i32) -> (i32, i32, i32) {
    (v / 10_000_000, (v / 100_000) % 100, v % 100_000)
}

macro_rules! hip_api {
    ($( $(#[$doc:meta])* $name:ident ( $($arg:ident : $ty:ty),* ); )*) => {
        /// The runtime's functions that rmcp calls, resolved once from the mapped runtime.
        /// `None`: the runtime does not export that name.
        #[allow(non_snake_case)]
        #[derive(Clone, Copy, Default, Debug)]
        pub struct HipApi {
            $( $(#[$doc])* pub $name: Option<unsafe extern "C" fn($($ty),*) -> HipError>, )*
        }

        impl HipApi {
            /// Every name in the table, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($name)),*];

            /// Resolves every name with `lookup`, which returns the symbol's address or null.
            pub fn resolve(mut lookup: impl FnMut(&CStr) -> *mut c_void) -> Self {
                HipApi {
                    $( $name: {
                        let name = concat!(stringify!($name), "\0");
                        // The literal above ends in exactly one NUL and has no other.
                        let name = CStr::from_bytes_with_nul(name.as_bytes()).expect("literal");
                        let p = lookup(name);
                        if p.is_null() {
                            None
                        } else {
                            // SAFETY: `p` is the address of the runtime's exported function of
                            // this name, whose C signature is the one declared in this table
                            // (hip_runtime_api.h); a fn pointer and a data pointer have the
                            // same size and representation on every target HIP supports.
                            Some(unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($ty),*) -> HipError>(p) })
                        }
                    }, )*
                }
            }

            /// The resolved address of `name`, if the table has that name and it resolved.
            pub fn address_of(&self, name: &str) -> Option<usize> {
                match name {
                    $( stringify!($name) => self.$name.map(|f| f as usize), )*
                    _ => None,
                }
            }
        }
    };
}

// The one table of hooked functions, `hooked_functions!`: in a file of its own, with no
// dependency but `core`, because the preloaded front (rmcp-shim/front, a `no_std` crate that
// build.rs compiles outside cargo's crate graph) includes the same file.
include!("hooks.rs");

/// `HipApi` from the hooked functions, the observed ones and the ones rmcp only queries. An
/// observed function's field holds its address only (it is never called through that type:
/// the shim jumps to it with the caller's own registers).
macro_rules! hip_api_with_queries {
    ([$(
        $(#[$doc:meta])* $name:ident = $variant:ident ($($arg:ident : $ty:ty),*)
        => out: $out:expr, size: $size:expr, flags: $flags:expr
        $(, resolves $sym:ident into $pfn:ident)?
        $(, host location in $prop:ident)?
        $(, names $nfn:ident from $kname:ident)?
        $(, loads image from $image:ident)?
        $(, loads file $fname:ident)?
        $(, unloads module $umodule:ident)?
        $(, waits $wait:ident)? ;
    )*]
    $( $(#[$odoc:meta])* $oname:ident = $ovariant:ident, $($word:ident)+ ; )*) => {
        hip_api! {
            $( $(#[$doc])* $name($($arg: $ty),*); )*
            $( $(#[$odoc])* $oname(); )*
            hipRuntimeGetVersion(version: *mut c_int);
            hipGetDeviceCount(count: *mut c_int);
            hipGetDevice(device: *mut c_int);
            /// Writes `"%04x:%02x:%02x.%x"`; needs `len > 12`.
            hipDeviceGetPCIBusId(buf: *mut c_char, len: c_int, device: c_int);
        }
    };
}

/// The hooked rows, handed on to `observed_functions!` with the observed ones.
macro_rules! hip_api_rows {
    ($($rows:tt)*) => {
        observed_functions!(hip_api_with_queries [$($rows)*]);
    };
}

hooked_functions!(hip_api_rows);

/// A PCI address as HIP prints it and KFD stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PciAddress {
    pub domain: u32,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl PciAddress {
    /// KFD's `location_id`: `(bus << 8) | (device << 3) | function`.
    pub fn location_id(&self) -> u32 {
        (u32::from(self.bus) << 8) | (u32::from(self.device) << 3) | u32::from(self.function)
    }

    pub fn from_kfd(domain: u32, location_id: u32) -> Self {
        PciAddress {
            domain,
            bus: ((location_id >> 8) & 0xff) as u8,
            device: ((location_id >> 3) & 0x1f) as u8,
            function: (location_id & 0x7) as u8,
        }
    }

    /// Parses `dddd:bb:dd.f` (what `hipDeviceGetPCIBusId` writes).
    pub fn parse(s: &str) -> Option<Self> {
        let (domain, rest) = s.split_once(':')?;
        let (bus, rest) = rest.split_once(':')?;
        let (device, function) = rest.split_once('.')?;
        let hex = |t: &str, max: u32| {
            if t.is_empty() || t.len() > 8 {
                return None;
            }
            u32::from_str_radix(t, 16).ok().filter(|v| *v <= max)
        };
        Some(PciAddress {
            domain: hex(domain, u32::MAX)?,
            bus: hex(bus, 0xff)? as u8,
            device: hex(device, 0x1f)? as u8,
            function: hex(function, 0x7)? as u8,
        })
    }
}

impl std::fmt::Display for PciAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_round_trip_and_location_id() {
        let a = PciAddress::parse("0000:03:00.0").unwrap();
        assert_eq!(a.location_id(), 768);
        assert_eq!(PciAddress::from_kfd(0, 768), a);
        let b = PciAddress::parse("0001:c1:1f.7").unwrap();
        assert_eq!(b.to_string(), "0001:c1:1f.7");
        assert_eq!(PciAddress::from_kfd(1, b.location_id()), b);
        for bad in [
            "",
            "0000:03:00",
            "0000:03:20.0",
            "0000:03:00.8",
            "zz:03:00.0",
            "0000:100:00.0",
        ] {
            assert_eq!(PciAddress::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn version_encoding() {
        assert_eq!(hip_version(6, 4), 60_400_000);
        assert_eq!(split_hip_version(50_221_153), (5, 2, 21153));
        assert_eq!(split_hip_version(60_443_483), (6, 4, 43483));
    }

    #[test]
    fn resolve_maps_null_to_none_and_keeps_addresses() {
        static MARK: u8 = 0;
        let api = HipApi::resolve(|name| {
            if name.to_bytes() == b"hipMalloc" {
                &MARK as *const u8 as *mut c_void
            } else {
                std::ptr::null_mut()
            }
        });
        assert_eq!(
            api.address_of("hipMalloc"),
            Some(&MARK as *const u8 as usize)
        );
        assert!(api.hipHostMalloc.is_none());
        assert_eq!(api.address_of("hipHostMalloc"), None);
        assert_eq!(api.address_of("notAHipName"), None);
        assert!(HipApi::NAMES.contains(&"hipGetProcAddress"));
        assert!(HipApi::NAMES.contains(&"hipGetDriverEntryPoint"));
    }
}
