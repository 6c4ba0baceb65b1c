//! `rmcp_core::code_objects` on arbitrary bytes: the ELF section lookup, the fat-binary scan
//! (plain and compressed bundles, one after another) on the whole input and on the
//! section it names, and the file-name parsers. Never panic; every bundle found starts
//! inside the input; a parsed target ID prints back to one that parses to the same value.
//! Seeds (fuzz/seeds/code_objects): bundles, compressed bundles of each version and
//! method, ELF files holding them, Tensile and kdb names, made with
//! `rmcp_core::code_objects::write`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcp_core::code_objects::{
    FATBIN_SECTION, TargetId, entry_kind, find_section, kdb_target, scan_fatbin, tensile_target,
};

fn check_scan(data: &[u8], start: u64, len: u64) {
    let scan = scan_fatbin(data, start, len);
    for b in &scan.bundles {
        assert!(b.offset >= start && b.offset < start.saturating_add(len));
        for t in &b.targets {
            assert_eq!(TargetId::parse(&t.to_string()).as_ref(), Some(t));
        }
    }
}

fuzz_target!(|data: &[u8]| {
    check_scan(data, 0, data.len() as u64);
    if let Ok(Some(s)) = find_section(data, FATBIN_SECTION) {
        check_scan(data, s.offset, s.size);
    }
    let text = String::from_utf8_lossy(data);
    if let Some(t) = TargetId::parse(&text) {
        assert_eq!(TargetId::parse(&t.to_string()), Some(t));
    }
    let _ = entry_kind(&text);
    let _ = tensile_target(&text);
    let _ = kdb_target(&text);
});
