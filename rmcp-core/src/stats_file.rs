//! The stats file (`RMCP_STATS_FILE`) read back: what `rmcp report --stats FILE` takes from
//! a file a user names, checked. It owns the file's size cap, the types of the fault fields
//! rmcp prints, and the caps on what it prints of them (each string, each list, the
//! nesting), so that a file the shim did not write (cut short, another program's JSON, made
//! to hurt) gives a sentence or a report of bounded size, never a huge report or a panic.
//! Bytes in, checked values or a sentence out; opening and reading the file (a regular file
//! only, without blocking, at most [`MAX_FILE_BYTES`]) is the CLI's `input` module.
//!
//! The shim writes the file (rmcp-shim's `report.rs`, each fault from `fault.rs`): counters
//! for some forty functions, the runtime copies, the devices, and per GPU fault the facts and
//! the block's lines, with kernel names cut at 256 bytes and paths at most `PATH_MAX`. Keys
//! this module does not know are kept (the format may grow) and capped like the rest.

use serde_json::{Map, Value};

/// The largest stats file read: the shim's files are a few KiB of counters and a few KiB per
/// fault (a real run's is under 64 KiB); 1 MiB leaves room for dozens of faults with long
/// paths, and keeps the parsed value (tens of MiB at worst) and the report small.
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// The longest text printed from a field: `PATH_MAX` (4096), the longest path the shim writes.
pub const MAX_TEXT_BYTES: usize = 4096;
/// The longest short field printed (an address, a code, a kind, a mode): a 64-bit address in
/// hex is 18 characters.
pub const MAX_WORD_BYTES: usize = 64;
/// The longest key printed.
pub const MAX_KEY_BYTES: usize = 64;
/// Items of a list (or keys of an object) printed: the shim's launch ring holds 256.
pub const MAX_ITEMS: usize = 256;
/// Faults printed.
pub const MAX_FAULTS: usize = 64;
/// Levels of nesting printed below a fault's field (the shim's deepest is 3:
/// `address_in.made_by.call`).
pub const MAX_DEPTH: usize = 6;

/// Why the file gives no faults to print: one sentence, without the file's name (the caller
/// puts it first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem(pub String);

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the file holds, checked and capped.
#[derive(Clone, Debug, PartialEq)]
pub struct StatsFaults {
    /// The `faults` array, each fault an object (keys in serde_json's order); None when the
    /// file has no `faults` key.
    pub faults: Option<Vec<Map<String, Value>>>,
    /// The `buffer_descriptors` counters (what the load-time fix saw and did), each a
    /// non-negative integer; None when the file has none (an rmcp without the fix wrote it).
    pub buffer_descriptors: Option<Map<String, Value>>,
    /// The `override_fixes` counters (the in-place fixes of gfx103x code under an
    /// override), each a non-negative integer; None when the file has none.
    pub override_fixes: Option<Map<String, Value>>,
    /// Every place something was cut, as a phrase: `faults[0].address: 10485760 bytes, 64
    /// shown`.
    pub cut: Vec<String>,
}

/// A field's type, as the shim writes it.
#[derive(Clone, Copy, Debug)]
enum Type {
    /// A string of at most the bytes given (longer ones are cut, not refused).
    Str(usize),
    /// A string or null.
    StrOrNull(usize),
    /// A non-negative integer.
    Count,
    /// A non-negative integer or null.
    CountOrNull,
    /// A list of strings.
    StrList,
    /// An object whose known keys have these types.
    Object(&'static [(&'static str, Type)]),
    /// A list of such objects.
    ObjectList(&'static [(&'static str, Type)]),
}

const GPU: &[(&str, Type)] = &[
    ("node", Type::CountOrNull),
    ("gfx", Type::StrOrNull(MAX_WORD_BYTES)),
    ("runtime_isa", Type::StrOrNull(MAX_TEXT_BYTES)),
    ("name", Type::StrOrNull(MAX_TEXT_BYTES)),
    ("pcie_atomics", Type::StrOrNull(MAX_WORD_BYTES)),
];

const KERNEL: &[(&str, Type)] = &[
    ("name", Type::StrOrNull(MAX_TEXT_BYTES)),
    ("library", Type::StrOrNull(MAX_TEXT_BYTES)),
    ("via", Type::Str(MAX_WORD_BYTES)),
    ("thread", Type::Str(MAX_WORD_BYTES)),
];

const PLACE: &[(&str, Type)] = &[
    ("in", Type::Str(MAX_WORD_BYTES)),
    ("base", Type::Str(MAX_WORD_BYTES)),
    ("size", Type::Count),
];

/// The fields of a fault the shim writes (rmcp-shim's `fault.rs`, `to_json`).
const FAULT: &[(&str, Type)] = &[
    ("kind", Type::Str(MAX_WORD_BYTES)),
    ("code", Type::Str(MAX_WORD_BYTES)),
    ("reasons", Type::StrList),
    ("address", Type::StrOrNull(MAX_WORD_BYTES)),
    ("gpu", Type::Object(GPU)),
    ("address_in", Type::Object(PLACE)),
    ("kernels", Type::ObjectList(KERNEL)),
    ("launches", Type::Count),
    ("override", Type::StrOrNull(MAX_TEXT_BYTES)),
    ("mode", Type::Str(MAX_WORD_BYTES)),
    ("rewritten", Type::Count),
    ("lines", Type::StrList),
];

/// The load-time fix's counters (rmcp-shim's `report.rs`, `buffer_descriptors`).
const BUFFER_DESCRIPTORS: &[(&str, Type)] = &[
    ("scanned", Type::Count),
    ("unreadable", Type::Count),
    ("broken", Type::Count),
    ("fixed", Type::Count),
    ("warned", Type::Count),
    ("instructions_fixed", Type::Count),
    ("fallbacks", Type::Count),
];

/// The in-place fixes' counters under an override (rmcp-shim's `report.rs`,
/// `override_fixes`).
const OVERRIDE_FIXES: &[(&str, Type)] = &[
    ("fixed", Type::Count),
    ("instructions_fixed", Type::Count),
    ("warned", Type::Count),
    ("fat_binaries", Type::Count),
    ("fat_binaries_left", Type::Count),
];

/// The JSON type of `v`, as a sentence names it.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn expected(t: Type) -> &'static str {
    match t {
        Type::Str(_) => "a string",
        Type::StrOrNull(_) => "a string or null",
        Type::Count => "a non-negative integer",
        Type::CountOrNull => "a non-negative integer or null",
        Type::StrList => "a list of strings",
        Type::Object(_) => "an object",
        Type::ObjectList(_) => "a list of objects",
    }
}

/// Checks the bytes of a stats file and gives its faults, capped for printing.
pub fn parse(bytes: &[u8]) -> Result<StatsFaults, Problem> {
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(Problem(format!(
            "larger than {} bytes, the most rmcp reads of a stats file (the shim's are a few KiB)",
            MAX_FILE_BYTES
        )));
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(Problem(
            "empty: not a stats file (the shim writes one JSON object)".into(),
        ));
    }
    let top: Value = serde_json::from_slice(bytes)
        .map_err(|e| Problem(format!("not JSON ({e}): not a stats file")))?;
    let Value::Object(mut top) = top else {
        return Err(Problem(format!(
            "the top level is {}, not an object: not a stats file",
            type_name(&top)
        )));
    };
    let mut cut = Vec::new();
    let faults = match top.remove("faults") {
        None => None,
        Some(Value::Array(list)) => {
            let total = list.len();
            let mut out = Vec::new();
            for (i, f) in list.into_iter().enumerate() {
                let at = format!("faults[{i}]");
                let Value::Object(fields) = f else {
                    return Err(Problem(format!("{at} is {}, not an object", type_name(&f))));
                };
                if i >= MAX_FAULTS {
                    continue;
                }
                out.push(object(fields, FAULT, &at, 0, &mut cut)?);
            }
            if total > MAX_FAULTS {
                cut.push(format!(
                    "faults: {total} faults, the first {MAX_FAULTS} shown"
                ));
            }
            Some(out)
        }
        Some(other) => {
            return Err(Problem(format!(
                "`faults` is {}, not a list",
                type_name(&other)
            )));
        }
    };
    let mut counters = |key: &str, known: &[(&str, Type)]| -> Result<_, Problem> {
        match top.remove(key) {
            None => Ok(None),
            Some(Value::Object(fields)) => Ok(Some(object(fields, known, key, 0, &mut cut)?)),
            Some(other) => Err(Problem(format!(
                "`{key}` is {}, not an object",
                type_name(&other)
            ))),
        }
    };
    let buffer_descriptors = counters("buffer_descriptors", BUFFER_DESCRIPTORS)?;
    let override_fixes = counters("override_fixes", OVERRIDE_FIXES)?;
    Ok(StatsFaults {
        faults,
        buffer_descriptors,
        override_fixes,
        cut,
    })
}

/// An object's fields checked against `known`, each value capped.
fn object(
    fields: Map<String, Value>,
    known: &[(&str, Type)],
    at: &str,
    depth: usize,
    cut: &mut Vec<String>,
) -> Result<Map<String, Value>, Problem> {
    let total = fields.len();
    let mut out = Map::new();
    for (k, v) in fields.into_iter().take(MAX_ITEMS) {
        let key = text(&k, MAX_KEY_BYTES, &format!("{at}: a key"), cut);
        let here = format!("{at}.{key}");
        let v = match known.iter().find(|(name, _)| *name == k) {
            Some(&(_, t)) => typed(v, t, &here, depth, cut)?,
            None => any(v, &here, depth + 1, cut),
        };
        out.insert(key, v);
    }
    if total > MAX_ITEMS {
        cut.push(format!("{at}: {total} keys, the first {MAX_ITEMS} shown"));
    }
    Ok(out)
}

/// A known field: refused when its type is not the shim's, capped when it is.
fn typed(
    v: Value,
    t: Type,
    at: &str,
    depth: usize,
    cut: &mut Vec<String>,
) -> Result<Value, Problem> {
    let wrong = |v: &Value| {
        Problem(format!(
            "{at} is {}, not {} as the shim writes it",
            type_name(v),
            expected(t)
        ))
    };
    let count = |v: &Value| v.as_u64().is_some();
    Ok(match (t, v) {
        (Type::Str(max) | Type::StrOrNull(max), Value::String(s)) => {
            Value::String(text(&s, max, at, cut))
        }
        (Type::StrOrNull(_) | Type::CountOrNull, Value::Null) => Value::Null,
        (Type::Count | Type::CountOrNull, v) if count(&v) => v,
        (Type::StrList, Value::Array(items)) => {
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate().take(MAX_ITEMS) {
                let here = format!("{at}[{i}]");
                let Value::String(s) = item else {
                    return Err(Problem(format!(
                        "{here} is {}, not a string as the shim writes it",
                        type_name(item)
                    )));
                };
                out.push(Value::String(text(s, MAX_TEXT_BYTES, &here, cut)));
            }
            list_cut(items.len(), at, cut);
            Value::Array(out)
        }
        (Type::Object(known), Value::Object(fields)) => {
            Value::Object(object(fields, known, at, depth + 1, cut)?)
        }
        (Type::ObjectList(known), Value::Array(items)) => {
            let n = items.len();
            let mut out = Vec::new();
            for (i, item) in items.into_iter().enumerate().take(MAX_ITEMS) {
                let here = format!("{at}[{i}]");
                let Value::Object(fields) = item else {
                    return Err(Problem(format!(
                        "{here} is {}, not an object as the shim writes it",
                        type_name(&item)
                    )));
                };
                out.push(Value::Object(object(fields, known, &here, depth + 1, cut)?));
            }
            list_cut(n, at, cut);
            Value::Array(out)
        }
        (_, v) => return Err(wrong(&v)),
    })
}

fn list_cut(n: usize, at: &str, cut: &mut Vec<String>) {
    if n > MAX_ITEMS {
        cut.push(format!("{at}: {n} items, the first {MAX_ITEMS} shown"));
    }
}

/// A field this module does not know: any JSON, capped (strings, lists, nesting).
fn any(v: Value, at: &str, depth: usize, cut: &mut Vec<String>) -> Value {
    match v {
        Value::String(s) => Value::String(text(&s, MAX_TEXT_BYTES, at, cut)),
        Value::Array(_) | Value::Object(_) if depth > MAX_DEPTH => {
            cut.push(format!(
                "{at}: nested deeper than {MAX_DEPTH} levels, not shown"
            ));
            Value::String("[not shown: nested too deep]".into())
        }
        Value::Array(items) => {
            let n = items.len();
            let out = items
                .into_iter()
                .take(MAX_ITEMS)
                .enumerate()
                .map(|(i, x)| any(x, &format!("{at}[{i}]"), depth + 1, cut))
                .collect();
            list_cut(n, at, cut);
            Value::Array(out)
        }
        Value::Object(fields) => {
            let n = fields.len();
            let mut out = Map::new();
            for (k, x) in fields.into_iter().take(MAX_ITEMS) {
                let key = text(&k, MAX_KEY_BYTES, &format!("{at}: a key"), cut);
                let here = format!("{at}.{key}");
                out.insert(key, any(x, &here, depth + 1, cut));
            }
            if n > MAX_ITEMS {
                cut.push(format!("{at}: {n} keys, the first {MAX_ITEMS} shown"));
            }
            Value::Object(out)
        }
        scalar => scalar,
    }
}

/// `s` as printed: control characters written as `\u{..}` (a terminal takes none of them
/// as a command, a Markdown line stays one line), at most `max` bytes of it (escapes
/// counted as printed), cut on a character boundary with a note saying how much of the
/// field was shown, and the cut recorded.
pub fn text(s: &str, max: usize, at: &str, cut: &mut Vec<String>) -> String {
    let mut out = String::with_capacity(s.len().min(max) + 48);
    for (i, c) in s.char_indices() {
        let escaped;
        let shown: &str = if c.is_control() {
            escaped = format!("\\u{{{:x}}}", c as u32);
            &escaped
        } else {
            &s[i..i + c.len_utf8()]
        };
        if out.len() + shown.len() > max {
            out.push_str(&format!("… [cut: {} bytes, {i} shown]", s.len()));
            cut.push(format!("{at}: {} bytes, {i} shown", s.len()));
            return out;
        }
        out.push_str(shown);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> StatsFaults {
        parse(s.as_bytes()).unwrap()
    }

    fn err(s: &str) -> String {
        parse(s.as_bytes()).unwrap_err().0
    }

    #[test]
    fn a_shim_written_fault_passes_whole() {
        let f = r#"{"calls": {}, "faults": [{"kind": "vm", "code": "0x1", "reasons": ["r"],
            "address": "0x7f0000001000", "gpu": {"node": 1, "gfx": "gfx1010",
            "runtime_isa": "gfx1010", "name": "RX 5700 XT", "pcie_atomics": "unsupported"},
            "address_in": {"in": "allocation", "kind": 1, "base": "0x7f0000000000",
            "size": 4096, "made_by": {"call": "hipHostMalloc", "library": "/x/libggml.so"}},
            "kernels": [{"name": "k", "library": null, "via": "hipLaunchKernel",
            "thread": "0x1"}], "launches": 3, "override": null, "mode": "auto",
            "rewritten": 1, "lines": ["a", "b"], "future": {"x": [1, 2]}}]}"#;
        let s = ok(f);
        assert!(s.cut.is_empty(), "{:?}", s.cut);
        let faults = s.faults.unwrap();
        let want: Value = serde_json::from_str::<Value>(f).unwrap()["faults"][0].clone();
        assert_eq!(Value::Object(faults[0].clone()), want);
    }

    #[test]
    fn no_faults_key_and_empty_list() {
        assert_eq!(ok(r#"{"calls": {}}"#).faults, None);
        assert_eq!(ok(r#"{"faults": []}"#).faults, Some(vec![]));
    }

    #[test]
    fn wrong_shapes_are_refused_with_the_place() {
        assert!(err("").starts_with("empty"));
        assert!(err("\0\0\0").starts_with("not JSON"));
        assert!(err("[1]").contains("the top level is a list"));
        assert!(err(r#"{"faults": 3}"#).contains("`faults` is a number, not a list"));
        assert!(err(r#"{"faults": ["x"]}"#).contains("faults[0] is a string, not an object"));
        assert_eq!(
            err(r#"{"faults": [{"address": 5}]}"#),
            "faults[0].address is a number, not a string or null as the shim writes it"
        );
        assert!(
            err(r#"{"faults": [{"lines": ["a", 1]}]}"#)
                .starts_with("faults[0].lines[1] is a number, not a string")
        );
        assert!(err(r#"{"faults": [{"launches": -1}]}"#).contains("non-negative integer"));
        assert!(
            err(r#"{"faults": [{"kernels": [{"name": 7}]}]}"#)
                .starts_with("faults[0].kernels[0].name is a number")
        );
        assert!(err(r#"{"faults": [{"gpu": []}]}"#).contains("faults[0].gpu is a list"));
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        assert!(err(&deep).starts_with("not JSON"));
    }

    #[test]
    fn long_fields_are_cut_and_said_to_be() {
        let long = "A".repeat(100_000);
        let s = ok(&format!(
            r#"{{"faults": [{{"address": "{long}", "other": "{long}"}}]}}"#
        ));
        let f = &s.faults.unwrap()[0];
        let a = f["address"].as_str().unwrap();
        assert!(a.starts_with(&"A".repeat(MAX_WORD_BYTES)), "{a}");
        assert!(a.ends_with("… [cut: 100000 bytes, 64 shown]"), "{a}");
        let o = f["other"].as_str().unwrap();
        assert!(o.len() < MAX_TEXT_BYTES + 64);
        assert_eq!(
            s.cut,
            [
                "faults[0].address: 100000 bytes, 64 shown",
                "faults[0].other: 100000 bytes, 4096 shown"
            ]
        );
        assert!(err(&format!(r#"{{"x": "{}"}}"#, "a".repeat(2 << 20))).starts_with("larger than"));
    }

    #[test]
    fn control_characters_are_shown_not_sent() {
        let s = ok(r#"{"faults": [{"kind": "a\u001b[2Jb\nc"}]}"#);
        assert_eq!(s.faults.unwrap()[0]["kind"], "a\\u{1b}[2Jb\\u{a}c");
        // Escapes count as printed: 20 ESCs are 120 bytes printed, past the 64 of `kind`.
        let s = ok(&format!(
            r#"{{"faults": [{{"kind": "{}"}}]}}"#,
            "\\u001b".repeat(20)
        ));
        assert_eq!(
            s.faults.unwrap()[0]["kind"],
            format!("{}… [cut: 20 bytes, 10 shown]", "\\u{1b}".repeat(10))
        );
    }

    #[test]
    fn lists_and_nesting_are_capped() {
        let many = vec!["1"; 1000].join(",");
        let nested = "[".repeat(20) + &"]".repeat(20);
        let s = ok(&format!(
            r#"{{"faults": [{{"n": [{many}], "d": {nested}}}]}}"#
        ));
        let f = &s.faults.unwrap()[0];
        assert_eq!(f["n"].as_array().unwrap().len(), MAX_ITEMS);
        assert!(
            s.cut
                .iter()
                .any(|c| c == "faults[0].n: 1000 items, the first 256 shown")
        );
        assert!(s.cut.iter().any(|c| c.contains("nested deeper than")));
        let faults = vec!["{}"; 100].join(",");
        let s = ok(&format!(r#"{{"faults": [{faults}]}}"#));
        assert_eq!(s.faults.unwrap().len(), MAX_FAULTS);
        assert!(s.cut.iter().any(|c| c.starts_with("faults: 100 faults")));
    }
}
