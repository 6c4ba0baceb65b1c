//! The fake runtime's record (FAKEHIP_RECORD, tests/fake-hip/fake_hip.c): one line per
//! call, parsed into [`Rec`], and which of the recorded functions allocate.

use std::collections::BTreeMap;

/// One line of the fake runtime's record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rec {
    /// The HIP function the runtime received.
    pub func: String,
    /// The size asked for.
    pub size: u64,
    /// The flags the runtime received.
    pub flags: u32,
    /// What the runtime answered.
    pub rc: i32,
    /// The object that made the call (e.g. `librmcp_shim.so`, `hip_probe6`).
    pub caller: String,
    /// The runtime copy that answered.
    pub lib: String,
    /// For lookups (hipGetProcAddress): the name looked up.
    pub symbol: Option<String>,
}

/// Parses a record file's text, one [`Rec`] per non-empty line.
pub fn parse_record(text: &str) -> Vec<Rec> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|line| {
            let mut it = line.split(' ');
            let func = it.next().unwrap().to_string();
            let kv: BTreeMap<&str, &str> = it.filter_map(|t| t.split_once('=')).collect();
            Rec {
                func,
                size: kv["size"].parse().unwrap(),
                flags: u32::from_str_radix(kv["flags"].trim_start_matches("0x"), 16).unwrap(),
                rc: kv["rc"].parse().unwrap(),
                caller: kv["caller"].to_string(),
                lib: kv["lib"].to_string(),
                symbol: kv.get("symbol").map(|s| s.to_string()),
            }
        })
        .collect()
}

/// Functions that allocate (what the tests assert on); queries and frees are left out.
pub const ALLOCATORS: &[&str] = &[
    "hipMalloc",
    "hipExtMallocWithFlags",
    "hipHostMalloc",
    "hipHostAlloc",
    "hipMallocHost",
    "hipMemAllocHost",
    "hipMallocManaged",
    "hipHostRegister",
    "hipMallocAsync",
    "hipMallocFromPoolAsync",
];
