//! Doctor output: aligned text for people (80 columns, colour only on a terminal and never
//! with NO_COLOR), and JSON with the schema documented in docs/cli.md.

use std::io::IsTerminal;

use super::report::{Atomics, Remedy, Report, Status};

pub const WIDTH: usize = 80;
const STATUS_W: usize = 5;
const CHECK_W: usize = 13;
/// Column where messages start: status, space, check, space.
const INDENT: usize = STATUS_W + 1 + CHECK_W + 1;

/// Colour when stdout is a terminal and NO_COLOR is unset or empty (no-color.org).
pub fn use_colour() -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    !no_color && std::io::stdout().is_terminal()
}

/// The JSON report (docs/cli.md), pretty-printed, with a final newline. It goes through a
/// `Value`, whose objects keep their keys sorted: the keys come out in alphabetical order,
/// as documented.
pub fn json(r: &Report) -> Result<String, serde_json::Error> {
    let value = serde_json::to_value(r)?;
    Ok(serde_json::to_string_pretty(&value)? + "\n")
}

/// Splits a word longer than `width` after slashes (paths), else anywhere; URLs are kept
/// whole so that they stay clickable.
fn split_long(word: &str, width: usize) -> Vec<String> {
    if word.chars().count() <= width || word.starts_with("http") {
        return vec![word.to_string()];
    }
    let mut parts = Vec::new();
    let mut cur = String::new();
    for seg in word.split_inclusive('/') {
        if !cur.is_empty() && cur.chars().count() + seg.chars().count() > width {
            parts.push(std::mem::take(&mut cur));
        }
        cur.push_str(seg);
        while cur.chars().count() > width {
            let head: String = cur.chars().take(width).collect();
            cur = cur.chars().skip(width).collect();
            parts.push(head);
        }
    }
    if !cur.is_empty() {
        parts.push(cur);
    }
    parts
}

/// Greedy word wrap; words longer than `width` are split (see `split_long`).
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    let words: Vec<String> = text
        .split_whitespace()
        .flat_map(|w| split_long(w, width))
        .collect();
    for word in &words {
        if !cur.is_empty() && cur.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(word);
    }
    if !cur.is_empty() {
        lines.push(cur);
    }
    lines
}

fn paint(s: &str, status: Status, colour: bool) -> String {
    if !colour {
        return s.to_string();
    }
    let code = match status {
        Status::Ok => "32",
        Status::Info => "36",
        Status::Warn => "33",
        Status::Error => "1;31",
    };
    format!("\x1b[{code}m{s}\x1b[0m")
}

/// Source lines: `see URL`, one link a line, at the message column (under the finding's
/// text), each link once per finding: `shown` holds the links already listed under it. A
/// URL is never broken, so that it stays clickable: a line with a long one passes 80
/// columns.
fn push_sources<'a>(
    out: &mut String,
    urls: impl IntoIterator<Item = &'a String>,
    shown: &mut Vec<&'a str>,
) {
    for url in urls {
        if shown.contains(&url.as_str()) {
            continue;
        }
        shown.push(url);
        out.push_str(&" ".repeat(INDENT));
        out.push_str("see ");
        out.push_str(url);
        out.push('\n');
    }
}

/// The words of a shell command: split at spaces outside quotes (and not escaped), so that
/// a quoted path with a space in it stays one word.
fn shell_words(cmd: &str) -> Vec<&str> {
    let mut words = Vec::new();
    let (mut start, mut quote, mut escaped) = (0, None, false);
    for (i, c) in cmd.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match (quote, c) {
            (None | Some('"'), '\\') => escaped = true,
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, ' ') => {
                words.push(&cmd[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    words.push(&cmd[start..]);
    words.retain(|w| !w.is_empty());
    words
}

/// A shell command in lines of at most `width` characters, broken between words with a
/// trailing ` \\`. A word longer than a line (a long comma-separated list) is broken after
/// a comma with a bare `\\`, which the shell joins back into one word; a word without a
/// comma stays whole, and so does a word with quotes (inside them the shell would keep the
/// `\\`).
pub fn wrap_command(cmd: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    for word in shell_words(cmd) {
        if !cur.is_empty() && cur.chars().count() + 1 + word.chars().count() + 2 > width {
            lines.push(std::mem::take(&mut cur) + " \\");
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        let pieces: Vec<&str> = if word.contains(['\'', '"']) {
            vec![word]
        } else {
            word.split_inclusive(',').collect()
        };
        for piece in pieces {
            if cur.chars().count() + piece.chars().count() + 1 > width
                && !cur.is_empty()
                && !cur.ends_with(' ')
            {
                lines.push(std::mem::take(&mut cur) + "\\");
            }
            cur.push_str(piece);
        }
    }
    if !cur.is_empty() {
        lines.push(cur);
    }
    lines
}

/// The remedy under a finding: `fix:` and its text, the commands (`$ `, continued lines
/// indented), the caveat, the sources not already listed under the finding, and the date
/// the facts were checked.
fn push_remedy<'a>(out: &mut String, r: &'a Remedy, shown: &mut Vec<&'a str>) {
    let pad = " ".repeat(INDENT);
    for (i, line) in wrap(&r.text, WIDTH - INDENT - 5).iter().enumerate() {
        out.push_str(&pad);
        out.push_str(if i == 0 { "fix: " } else { "     " });
        out.push_str(line);
        out.push('\n');
    }
    for c in &r.commands {
        for (i, line) in wrap_command(c, WIDTH - INDENT - 6).iter().enumerate() {
            out.push_str(&pad);
            out.push_str(if i == 0 { "  $ " } else { "      " });
            out.push_str(line);
            out.push('\n');
        }
    }
    if let Some(c) = &r.caveat {
        for (i, line) in wrap(c, WIDTH - INDENT - 10).iter().enumerate() {
            out.push_str(&pad);
            out.push_str(if i == 0 { "  caveat: " } else { "          " });
            out.push_str(line);
            out.push('\n');
        }
    }
    push_sources(out, &r.sources, shown);
    if let Some(d) = r.checked {
        out.push_str(&pad);
        out.push_str(&format!("(facts checked {d})\n"));
    }
}

fn dash(v: Option<String>) -> String {
    v.unwrap_or_else(|| "-".to_string())
}

pub fn human(r: &Report, colour: bool) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "rmcp doctor {} (commit {})\n",
        r.version, r.commit
    ));
    for line in wrap(&format!("KFD topology: {}", r.sysfs.display()), WIDTH) {
        out.push_str(&line);
        out.push('\n');
    }
    out.push('\n');

    if r.gpus.is_empty() {
        out.push_str("GPUs: none\n\n");
    } else {
        out.push_str("GPUs\n");
        out.push_str(&format!(
            "  {:<4} {:<8} {:<12} {:<6} {:<11} {:<8} {}\n",
            "node", "gfx", "pci", "device", "atomics", "override", "rmcp"
        ));
        for g in &r.gpus {
            let device = g.device_id.map(|d| format!("0x{d:04x}"));
            let atomics = match g.pcie_atomics {
                Atomics::Supported => "yes",
                Atomics::Unsupported => "no",
                Atomics::Unknown => "unknown",
            };
            out.push_str(&format!(
                "  {:<4} {:<8} {:<12} {:<6} {:<11} {:<8} {}\n",
                g.node,
                g.gfx,
                dash(g.pci.clone()),
                dash(device),
                atomics,
                dash(g.gfx_override.clone()),
                g.rmcp.as_str()
            ));
        }
        out.push('\n');
    }

    out.push_str("Findings\n");
    for f in &r.findings {
        let lines = wrap(&f.message, WIDTH - INDENT);
        for (i, line) in lines.iter().enumerate() {
            if i == 0 {
                let status = format!("{:<STATUS_W$}", f.status.as_str());
                out.push_str(&paint(&status, f.status, colour));
                out.push_str(&format!(" {:<CHECK_W$} ", f.check.as_str()));
            } else {
                out.push_str(&" ".repeat(INDENT));
            }
            out.push_str(line);
            out.push('\n');
        }
        for d in &f.details {
            for (i, line) in wrap(d, WIDTH - INDENT - 2).iter().enumerate() {
                out.push_str(&" ".repeat(INDENT));
                out.push_str(if i == 0 { "- " } else { "  " });
                out.push_str(line);
                out.push('\n');
            }
        }
        let mut shown = Vec::new();
        push_sources(&mut out, f.source.iter().chain(&f.see_also), &mut shown);
        if let Some(r) = &f.remedy {
            push_remedy(&mut out, r, &mut shown);
        }
    }
    out.push('\n');
    let errors = r.count(Status::Error);
    let warns = r.count(Status::Warn);
    out.push_str(&format!(
        "{} error{}, {} warning{}, {} info, {} ok.\n",
        errors,
        if errors == 1 { "" } else { "s" },
        warns,
        if warns == 1 { "" } else { "s" },
        r.count(Status::Info),
        r.count(Status::Ok)
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_keeps_words_and_width() {
        let text = "one two three four five six seven eight nine ten eleven twelve";
        let lines = wrap(text, 15);
        assert!(lines.iter().all(|l| l.len() <= 15), "{lines:?}");
        assert_eq!(lines.join(" "), text);
        let url = format!("https://{}", "x".repeat(30));
        assert_eq!(wrap(&format!("a {url} b"), 10), vec!["a", &url, "b"]);
        assert_eq!(
            wrap("see /usr/lib/x86_64-linux-gnu/libamdhip64.so.5 now", 20),
            vec!["see /usr/lib/", "x86_64-linux-gnu/", "libamdhip64.so.5 now"]
        );
        assert_eq!(wrap(&"y".repeat(25), 10).concat(), "y".repeat(25));
        assert!(wrap("", 10).is_empty());
    }

    #[test]
    fn see_lines_sit_under_the_text_and_name_each_link_once() {
        use super::super::report::{Check, Finding};
        let (a, b) = (
            "https://github.com/ROCm/legacy-rocm-build/issues/887",
            "https://github.com/ROCm/TheRock/blob/main/cmake/therock_amdgpu_targets.cmake",
        );
        let f = Finding::new(Check::Pytorch, Status::Error, "a finding")
            .source(a)
            .see_also(a)
            .see_also(b)
            .remedy(Remedy::new("do this").source(b).source(a));
        let r = Report {
            version: "0".into(),
            commit: "x".into(),
            sysfs: "/sys".into(),
            gpus: Vec::new(),
            libraries: Vec::new(),
            code_objects: Vec::new(),
            findings: vec![f],
        };
        let text = human(&r, false);
        let see: Vec<&str> = text.lines().filter(|l| l.contains("see ")).collect();
        let pad = " ".repeat(INDENT);
        assert_eq!(
            see,
            [format!("{pad}see {a}"), format!("{pad}see {b}")],
            "{text}"
        );
        // The message starts at the same column.
        let first = text.lines().find(|l| l.contains("a finding")).unwrap();
        assert_eq!(first.find("a finding"), Some(INDENT), "{text}");
    }

    #[test]
    fn commands_wrap_with_continuations() {
        let cmd = "pip install --index-url https://rocm.nightlies.amd.com/whl-multi-arch/ \
                   \"torch[device-gfx1010]\"";
        let lines = wrap_command(cmd, 54);
        assert_eq!(
            lines,
            [
                "pip install --index-url \\",
                "https://rocm.nightlies.amd.com/whl-multi-arch/ \\",
                "\"torch[device-gfx1010]\""
            ]
        );
        assert!(lines.iter().all(|l| l.chars().count() <= 54), "{lines:?}");
        // Joined back, the shell reads the same words.
        let joined = lines.join(" ").replace(" \\ ", " ");
        assert_eq!(joined, cmd.split_whitespace().collect::<Vec<_>>().join(" "));
        assert_eq!(wrap_command("unset X", 54), ["unset X"]);
        let long = wrap_command(
            "rmcp run --targets gfx1010,gfx1011,gfx1012,gfx1013 -- x",
            30,
        );
        assert_eq!(
            long,
            [
                "rmcp run --targets \\",
                "gfx1010,gfx1011,gfx1012,\\",
                "gfx1013 -- x"
            ]
        );
        assert!(long.iter().all(|l| l.chars().count() <= 30), "{long:?}");
        // A word longer than a line has a line of its own, and no empty line before it.
        assert_eq!(
            wrap_command("rm -rf -- /a/very/long/path/without/commas", 16),
            ["rm -rf -- \\", "/a/very/long/path/without/commas"]
        );
        // A quoted path is one word: never broken at its space or its comma.
        let quoted = wrap_command("rm -rf -- '/h/a b,c/x' /h/y '/h/it'\\''s d'", 16);
        assert_eq!(
            quoted,
            [
                "rm -rf -- \\",
                "'/h/a b,c/x' \\",
                "/h/y \\",
                "'/h/it'\\''s d'"
            ]
        );
    }
}
