//! Turns `src/gfx10/ops.tsv` (LLVM 15's disassembler's view of every GFX10 opcode,
//! written by `scripts/gfx10-ops`) into the decoder's tables: one array per encoding,
//! indexed by opcode, in `$OUT_DIR/gfx10_ops.rs` (included by `src/gfx10/ops.rs`).

use std::fmt::Write as _;

/// The tables: (`ops.tsv`'s format name, Rust name, size).
const TABLES: &[(&str, &str, usize)] = &[
    ("sop1", "SOP1", 256),
    ("sop2", "SOP2", 128),
    ("sopk", "SOPK", 32),
    ("sopc", "SOPC", 128),
    ("sopp", "SOPP", 128),
    ("smem", "SMEM", 256),
    ("vop1", "VOP1", 256),
    ("vop2", "VOP2", 64),
    ("vopc", "VOPC", 256),
    ("vop3", "VOP3", 1024),
    ("vop3p", "VOP3P", 128),
    ("vintrp", "VINTRP", 4),
    ("ds", "DS", 256),
    ("flat", "FLAT", 128),
    ("global", "GLOBAL", 128),
    ("scratch", "SCRATCH", 128),
    ("mubuf", "MUBUF", 256),
    ("mtbuf", "MTBUF", 16),
    ("mimg", "MIMG", 256),
    ("exp", "EXP", 1),
];

fn field(s: &str) -> u8 {
    let (kind, n) = s.split_at(1);
    let n: u8 = match n.parse() {
        Ok(n) if n > 0 && n < 64 => n,
        _ => return 0,
    };
    match kind {
        "s" => n,
        "v" => 0x80 | n,
        _ => 0,
    }
}

/// A card's column: `=` the same, `!` invalid, else its mnemonic. `~name` (the same
/// mnemonic, other operand text) with gfx1030's own name is the same instruction printed
/// otherwise (`s_waitcnt_depctr`'s immediate, which gfx101x code carries too: LLVM's own
/// gfx101x workarounds emit it); the operand whose meaning does change (SCRATCH's SADDR
/// 0x7f) the decoder's scan checks by value.
fn card(s: &str, name: &str) -> String {
    match s {
        "=" => "Card::Same".into(),
        "!" => "Card::Invalid".into(),
        other if other.strip_prefix('~') == Some(name) => "Card::Same".into(),
        other => format!("Card::Other({:?})", other.trim_start_matches('~')),
    }
}

fn main() {
    let path = "src/gfx10/ops.tsv";
    println!("cargo:rerun-if-changed={path}");
    println!("cargo:rerun-if-changed=build.rs");
    let text = std::fs::read_to_string(path).expect("src/gfx10/ops.tsv");
    let mut tables: Vec<Vec<Option<String>>> =
        TABLES.iter().map(|(_, _, n)| vec![None; *n]).collect();
    for (line_no, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let c: Vec<&str> = line.split('\t').collect();
        assert!(
            c.len() >= 12,
            "ops.tsv line {}: {} columns",
            line_no + 1,
            c.len()
        );
        let Some(t) = TABLES.iter().position(|(n, _, _)| *n == c[0]) else {
            continue;
        };
        let opcode: usize = c[1].parse().expect("opcode");
        if opcode >= TABLES[t].2 {
            panic!("ops.tsv line {}: opcode {opcode} out of range", line_no + 1);
        }
        let mut flags: Vec<&str> = c[8].split(',').filter(|f| *f != "-").collect();
        let mut name = c[2].to_string();
        if name == "!" {
            // Only gfx101x has it: its name from the first card that does.
            name = c[9..12]
                .iter()
                .find(|n| **n != "!" && **n != "=")
                .map(|n| n.trim_start_matches('~').to_string())
                .unwrap_or_default();
            flags.push("not_gfx1030");
        }
        let fields: Vec<u8> = (3..8).map(|i| field(c[i])).collect();
        let mut bits: Vec<&str> = Vec::new();
        for f in &flags {
            bits.push(match *f {
                "rvcc" => "RVCC",
                "wvcc" => "WVCC",
                "wexec" => "WEXEC",
                "rexec" => "REXEC",
                "load" => "LOAD",
                "store" => "STORE",
                "atomic" => "ATOMIC",
                "branch" => "BRANCH",
                "rm0" => "RM0",
                "not_gfx1030" => "NOT_GFX1030",
                _ => continue,
            });
        }
        let fmt = c[0];
        if fmt == "vop2"
            && ["v_madmk_", "v_madak_", "v_fmamk_", "v_fmaak_"]
                .iter()
                .any(|p| name.starts_with(p))
        {
            bits.push("KIMM");
        }
        if (fmt.starts_with("vop") && (name.contains("fmac") || name.starts_with("v_mac_")))
            || name.starts_with("v_dot2c")
            || name.starts_with("v_dot4c")
            || name.starts_with("v_dot8c")
            || name == "v_writelane_b32"
        {
            bits.push("TIED");
        }
        if fmt == "sop1" && (name.contains("saveexec") || name.contains("wrexec")) {
            bits.push("WEXEC_SALU");
        }
        if name.starts_with("s_movrel")
            || name.starts_with("v_movrel")
            || name.starts_with("ds_gws")
            || name.starts_with("ds_ordered_count")
            || name.starts_with("ds_append")
            || name.starts_with("ds_consume")
        {
            bits.push("RM0");
        }
        bits.sort();
        bits.dedup();
        let flags = if bits.is_empty() {
            "0".to_string()
        } else {
            bits.join(" | ")
        };
        let entry = format!(
            "Op {{ name: {name:?}, fields: {fields:?}, flags: {flags}, cards: [{}, {}, {}] }}",
            card(c[9], &name),
            card(c[10], &name),
            card(c[11], &name)
        );
        tables[t][opcode] = Some(entry);
    }
    // EXP (one encoding, no opcode field; what LLVM prints depends on the target only
    // for shaders): all three cards read it alike.
    let exp = TABLES.iter().position(|(n, _, _)| *n == "exp").unwrap();
    tables[exp][0].get_or_insert_with(|| {
        "Op { name: \"exp\", fields: [0; 5], flags: 0, cards: [Card::Same; 3] }".into()
    });
    let mut out = String::new();
    for ((_, rust, n), rows) in TABLES.iter().zip(&tables) {
        writeln!(out, "static {rust}: [&Op; {n}] = [").unwrap();
        for r in rows {
            match r {
                Some(e) => writeln!(out, "    &{e},").unwrap(),
                None => writeln!(out, "    &UNKNOWN,").unwrap(),
            }
        }
        writeln!(out, "];").unwrap();
    }
    out.push_str(
        "/// The opcode's entry, None for an opcode neither family has.\n\
         pub fn lookup(format: Format, opcode: u16) -> Option<&'static Op> {\n    \
         let table: &[&Op] = match format {\n",
    );
    for (name, rust, _) in TABLES {
        let variant = match *name {
            "sop1" => "Sop1",
            "sop2" => "Sop2",
            "sopk" => "Sopk",
            "sopc" => "Sopc",
            "sopp" => "Sopp",
            "smem" => "Smem",
            "vop1" => "Vop1",
            "vop2" => "Vop2",
            "vopc" => "Vopc",
            "vop3" => "Vop3",
            "vop3p" => "Vop3p",
            "vintrp" => "Vintrp",
            "ds" => "Ds",
            "flat" => "Flat",
            "global" => "Global",
            "scratch" => "Scratch",
            "mubuf" => "Mubuf",
            "mtbuf" => "Mtbuf",
            "mimg" => "Mimg",
            _ => "Exp",
        };
        writeln!(out, "        Format::{variant} => &{rust},").unwrap();
    }
    out.push_str(
        "    };\n    let op = *table.get(usize::from(opcode))?;\n    \
         (!op.name.is_empty()).then_some(op)\n}\n",
    );
    let dest = std::path::Path::new(&std::env::var("OUT_DIR").unwrap()).join("gfx10_ops.rs");
    std::fs::write(dest, out).unwrap();
}
