//! `Properties::parse` and `Properties::parse_keys` on arbitrary text: never panic, and
//! filtering by keys never changes the value found for a kept key.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcp_core::topology::Properties;

/// Names the shim and `rmcp doctor` look up.
const NAMES: &[&str] = &[
    "simd_count",
    "gfx_target_version",
    "domain",
    "location_id",
    "vendor_id",
    "device_id",
    "type",
    "node_to",
    "flags",
];

fuzz_target!(|data: &[u8]| {
    let Some((&select, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let all = Properties::parse(&text);
    // Names are single non-empty tokens, each kept once.
    for (i, (name, _)) in all.values.iter().enumerate() {
        assert!(!name.is_empty());
        assert!(!name.bytes().any(|b| b.is_ascii_whitespace()), "{name:?}");
        assert!(
            all.values[..i].iter().all(|(n, _)| n != name),
            "{name:?} kept twice"
        );
    }
    // A subset of NAMES chosen by the first byte.
    let keys: Vec<&str> = NAMES
        .iter()
        .enumerate()
        .filter(|(i, _)| select & (1 << (i % 8)) != 0)
        .map(|(_, n)| *n)
        .collect();
    let some = Properties::parse_keys(&text, Some(&keys));
    for (name, v) in &some.values {
        assert!(keys.contains(&name.as_str()), "{name:?} was not asked for");
        assert_eq!(all.get(name), Some(*v), "{name:?}");
    }
    for k in &keys {
        assert_eq!(some.get(k), all.get(k), "{k:?}");
    }
    assert!(some.problems.len() <= all.problems.len());
});
