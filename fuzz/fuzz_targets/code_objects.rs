//! `rmcp_core::code_objects` on arbitrary bytes: the ELF section lookup, the fat-binary scan
//! (plain and compressed bundles, one after another) on the whole input and on the
//! section it names, the entry a registered fat binary gives the GPUs
//! (`rmcp_core::fatbin`), and the file-name parsers. Never panic; every bundle found starts
//! inside the input; a parsed target ID prints back to one that parses to the same value;
//! an entry found, put alone in a bundle, is found again there.
//! Seeds (fuzz/seeds/code_objects): bundles, compressed bundles of each version and
//! method, ELF files holding them, Tensile and kdb names, made with
//! `rmcp_core::code_objects::write`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcp_core::code_objects::{
    FATBIN_SECTION, TargetId, entry_kind, find_section, kdb_target, scan_fatbin, tensile_target,
};
use rmcp_core::fatbin::{Loaded, entry_to_load, single_entry_bundle};
use rmcp_core::gfx::Gfx;

fn check_entry(data: &[u8]) {
    let isa = Gfx(100300);
    let _ = entry_to_load(data, &[isa, Gfx(100100)], isa, 1 << 20);
    if let Loaded::Entry {
        object, id, host, ..
    } = entry_to_load(data, &[isa], isa, 1 << 20)
    {
        assert!(object.len() <= 1 << 20);
        let one = single_entry_bundle(host.as_deref(), &id, &object);
        match entry_to_load(one.as_slice(), &[isa], isa, 1 << 20) {
            Loaded::Entry { object: again, .. } => assert_eq!(again, object),
            other => panic!("the one-entry bundle gave {other:?}"),
        }
    }
}

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
    check_entry(data);
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
