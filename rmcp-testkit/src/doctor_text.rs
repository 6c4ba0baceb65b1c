//! The layout rules of `rmcp doctor`'s text output that every test of it checks: lines of
//! at most 80 columns, except a `see URL` line (a URL is never broken); source lines at the
//! column where a finding's text starts, each link once per finding. And the commands a
//! finding prints, read back as a user would paste them.

/// The column where a finding's text starts: status (5), a space, check (13), a space.
pub const MESSAGE_COLUMN: usize = 20;

/// The commands among a finding's indented `lines`, exactly as shown: each line starting
/// with `$ ` (indentation and `$ ` removed) and, after a line ending in `\`, the next line
/// joined to it with a newline (continuations kept for the shell); other lines skipped.
pub fn printed_commands_in<'a>(lines: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut commands: Vec<String> = Vec::new();
    let mut continued = false;
    for line in lines {
        let t = line.trim_start();
        if continued {
            let last = commands.last_mut().unwrap();
            last.push('\n');
            last.push_str(t);
        } else if let Some(c) = t.strip_prefix("$ ") {
            commands.push(c.to_string());
        } else {
            continue;
        }
        continued = t.ends_with('\\');
    }
    commands
}

/// Err naming the first line that breaks a rule.
pub fn check_doctor_layout(text: &str) -> Result<(), String> {
    let see = format!("{}see ", " ".repeat(MESSAGE_COLUMN));
    let mut listed: Vec<&str> = Vec::new();
    for line in text.lines() {
        if !line.starts_with(' ') {
            // A finding's first line, or a heading: a new list of links.
            listed.clear();
        }
        let trimmed = line.trim_start();
        let is_see = trimmed.starts_with("see http") && !trimmed[4..].contains(' ');
        if is_see {
            if !line.starts_with(&see) {
                return Err(format!("a see line not under the finding's text: {line:?}"));
            }
            let url = &trimmed[4..];
            if listed.contains(&url) {
                return Err(format!("{url} listed twice under one finding"));
            }
            listed.push(url);
        } else if line.chars().count() > 80 {
            return Err(format!("{} columns: {line:?}", line.chars().count()));
        }
    }
    Ok(())
}

/// The `code_objects` row of `rmcp doctor --json` output `j` for the library at `path`
/// (compared as the doctor gives it: canonical). Panics, listing the rows, when none is.
pub fn code_objects_row<'a>(
    j: &'a serde_json::Value,
    path: &std::path::Path,
) -> &'a serde_json::Value {
    let want = std::fs::canonicalize(path).unwrap().display().to_string();
    j["code_objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["path"] == want.as_str())
        .unwrap_or_else(|| panic!("{want} not in {:#}", j["code_objects"]))
}

/// The commands of a finding's remedy in `rmcp doctor --json` output (`remedy.commands`).
pub fn remedy_commands(finding: &serde_json::Value) -> Vec<String> {
    finding["remedy"]["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed_commands_keep_their_continuations() {
        let lines = [
            "    reason",
            "    $ pip install a \\",
            "        --index-url b",
            "    $ rmcp doctor",
            "    see https://example.org",
        ];
        assert_eq!(
            printed_commands_in(lines),
            ["pip install a \\\n--index-url b", "rmcp doctor"]
        );
    }

    #[test]
    fn the_rules() {
        let pad = " ".repeat(MESSAGE_COLUMN);
        let long = format!("https://example.org/{}", "x".repeat(70));
        let good = format!("error check         text\n{pad}see {long}\n{pad}see https://a/\n");
        assert_eq!(check_doctor_layout(&good), Ok(()));
        let twice = format!("{good}{pad}see https://a/\n");
        assert!(check_doctor_layout(&twice).unwrap_err().contains("twice"));
        let next = format!("{good}warn  other         text\n{pad}see https://a/\n");
        assert_eq!(check_doctor_layout(&next), Ok(()));
        let off = format!("error check         text\n       see {long}\n");
        assert!(check_doctor_layout(&off).unwrap_err().contains("not under"));
        let wide = format!("{pad}{}\n", "y".repeat(61));
        assert!(
            check_doctor_layout(&wide)
                .unwrap_err()
                .contains("81 columns")
        );
    }
}
