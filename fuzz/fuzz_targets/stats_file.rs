//! `stats_file::parse` (what `rmcp report --stats FILE` reads) on arbitrary bytes: never
//! panic; what it gives is within its caps (faults, items per list, bytes per string, no
//! control character left in a string), and when nothing was cut, the faults written back
//! as JSON (as `rmcp report --json` prints them) read back the same (floats aside).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcp_core::stats_file::{self, MAX_FAULTS, MAX_ITEMS, MAX_TEXT_BYTES};
use serde_json::Value;

/// The longest string the cap allows, with its note.
const MAX_SHOWN: usize = MAX_TEXT_BYTES + 64;

fn within_caps(v: &Value) {
    match v {
        Value::String(s) => {
            assert!(s.len() <= MAX_SHOWN, "{} bytes", s.len());
            assert!(!s.chars().any(char::is_control), "{s:?}");
        }
        Value::Array(a) => {
            assert!(a.len() <= MAX_ITEMS);
            a.iter().for_each(within_caps);
        }
        Value::Object(o) => {
            assert!(o.len() <= MAX_ITEMS);
            for (k, x) in o {
                assert!(!k.chars().any(char::is_control), "{k:?}");
                within_caps(x);
            }
        }
        _ => {}
    }
}

fn has_float(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.is_f64(),
        Value::Array(a) => a.iter().any(has_float),
        Value::Object(o) => o.values().any(has_float),
        _ => false,
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(s) = stats_file::parse(data) else {
        return;
    };
    let Some(faults) = s.faults else {
        return;
    };
    assert!(faults.len() <= MAX_FAULTS);
    for f in &faults {
        within_caps(&Value::Object(f.clone()));
    }
    // (Floats aside: serde_json's default float parsing may differ in the last bit from
    // the shortest form it prints.)
    if !s.cut.is_empty() || faults.iter().any(|f| f.values().any(has_float)) {
        return;
    }
    // Printed back (as `rmcp report --json` does) and read again: the same faults.
    let again = serde_json::json!({ "faults": faults });
    let bytes = serde_json::to_vec(&again).unwrap();
    if bytes.len() as u64 <= stats_file::MAX_FILE_BYTES {
        let back = stats_file::parse(&bytes).expect("a printed report reads back");
        assert_eq!(back.faults.as_ref(), Some(&faults));
    }
});
