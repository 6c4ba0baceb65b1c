//! `Gfx::parse` and `config::parse_targets` on arbitrary text: never panic; a parsed name
//! prints back to a name that parses to the same value; a target list is non-empty and
//! has no repeats.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcp_core::config::parse_targets;
use rmcp_core::gfx::Gfx;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Some(g) = Gfx::parse(&text) {
        assert!(g.major() > 0);
        let shown = g.to_string();
        assert_eq!(Gfx::parse(&shown), Some(g), "{text:?} -> {shown:?}");
    }
    if let Some(list) = parse_targets(&text) {
        assert!(!list.is_empty());
        for (i, g) in list.iter().enumerate() {
            assert!(!list[..i].contains(g), "{g} repeated");
            assert_eq!(Gfx::parse(&g.to_string()), Some(*g));
        }
    }
});
