//! What the emulated GPU's fault tests compare in a program's stderr: the text with what
//! changes from run to run masked, the runtime's own part (neither rmcp's lines nor the
//! emulator's notes), that a run with rmcp ends and reads as one without, and where rmcp's
//! fault block stands before the runtime's message.

use std::os::unix::process::ExitStatusExt;
use std::process::Output;

/// Masks what changes from run to run: hex addresses, numbers (times, pids, ids).
pub fn masked(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '0' && chars.peek() == Some(&'x') {
            chars.next();
            while chars.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
                chars.next();
            }
            out.push_str("0xN");
        } else if c.is_ascii_digit() {
            while chars.peek().is_some_and(|c| c.is_ascii_digit()) {
                chars.next();
            }
            out.push('N');
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether a stderr line is the runtime's: neither rmcp's (`rmcp[`) nor the emulator's note.
fn is_runtime_line(l: &str) -> bool {
    !l.starts_with("rmcp[") && !l.starts_with("emulated-gpu:")
}

/// stderr without rmcp's lines and the emulator's own notes.
pub fn runtime_part(stderr: &str) -> String {
    stderr
        .lines()
        .filter(|l| is_runtime_line(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// ROCr's VM fault report without the listing of its "Nearby memory map" and "PtrInfo"
/// (which blocks lie nearest the address, and whether they are VRAM or System, moves with
/// the address-space layout from run to run, with or without rmcp): the lines from "Nearby
/// memory map:" to the first that is none of the listing's (an address range, a blank, a
/// "PtrInfo:" or an indented field), which is kept.
pub fn without_memory_map(s: &str) -> String {
    let mut out = Vec::new();
    let mut listing = false;
    for l in s.lines() {
        if l == "Nearby memory map:" {
            listing = true;
            continue;
        }
        if listing
            && (l.is_empty() || l.starts_with("0x") || l.starts_with('\t') || l == "PtrInfo:")
        {
            continue;
        }
        listing = false;
        out.push(l);
    }
    out.join("\n")
}

/// The same run `with` rmcp as `without`: the same signal and exit code, the same stdout and
/// the same runtime part of stderr, after masking (`ctx` in each message).
#[track_caller]
pub fn assert_same_ending(without: &Output, with: &Output, ctx: &str) {
    assert_same_ending_seen(without, with, ctx, str::to_string);
}

/// [`assert_same_ending`], the runtime's part of stderr compared as `view` shows it (a view
/// that leaves out what moves from run to run with or without rmcp).
#[track_caller]
pub fn assert_same_ending_seen(
    without: &Output,
    with: &Output,
    ctx: &str,
    view: impl Fn(&str) -> String,
) {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    assert_eq!(with.status.signal(), without.status.signal(), "{ctx}");
    assert_eq!(with.status.code(), without.status.code(), "{ctx}");
    assert_eq!(
        masked(&text(&with.stdout)),
        masked(&text(&without.stdout)),
        "{ctx}"
    );
    assert_eq!(
        masked(&view(&runtime_part(&text(&with.stderr)))),
        masked(&view(&runtime_part(&text(&without.stderr)))),
        "{ctx}"
    );
}

/// Where rmcp's fault block stands in stderr's `lines`: the first line containing `first`,
/// and the first of the runtime's lines (`lines.len()` when there is none); None when no
/// line contains `first`. The caller checks that the block comes first.
pub fn fault_block_span(lines: &[&str], first: &str) -> Option<(usize, usize)> {
    let start = lines.iter().position(|l| l.contains(first))?;
    let runtime_first = lines
        .iter()
        .position(|l| is_runtime_line(l))
        .unwrap_or(lines.len());
    Some((start, runtime_first))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_addresses_and_numbers() {
        assert_eq!(masked("at 0x7f00ab pid 1234, x9"), "at 0xN pid N, xN");
    }

    fn output(raw_status: i32, stdout: &str, stderr: &str) -> Output {
        Output {
            status: std::process::ExitStatus::from_raw(raw_status),
            stdout: stdout.into(),
            stderr: stderr.into(),
        }
    }

    #[test]
    fn the_same_ending_after_masking_passes() {
        let without = output(6, "pid 1\n", "Memory access fault at 0x1000\n");
        let with = output(
            6,
            "pid 2\n",
            "rmcp[2]: block\nMemory access fault at 0x2000\n",
        );
        assert_same_ending(&without, &with, "ctx");
    }

    #[test]
    #[should_panic]
    fn another_signal_fails() {
        assert_same_ending(&output(6, "", ""), &output(11, "", ""), "ctx");
    }

    #[test]
    #[should_panic]
    fn another_runtime_message_fails() {
        assert_same_ending(&output(6, "", "fault\n"), &output(6, "", "other\n"), "ctx");
    }

    #[test]
    fn the_runtime_part_and_the_block_span() {
        let e = "emulated-gpu: note\nrmcp[1]: error: GPU memory fault\nrmcp[1]:   k\nMemory access fault\n";
        assert_eq!(runtime_part(e), "Memory access fault");
        let lines: Vec<&str> = e.lines().collect();
        assert_eq!(fault_block_span(&lines, "GPU memory fault"), Some((1, 3)));
        assert_eq!(fault_block_span(&lines, "absent"), None);
    }

    #[test]
    fn the_memory_map_listing_is_left_out_and_the_rest_kept() {
        let report = |kind: &str| {
            format!(
                "Memory access fault by GPU node-1 (Agent handle: 0x1) on address 0x7f00. Reason: x.\n\
             Nearby memory map:\n0x7f00, 0x1000, System\n0x7f80, 0x3000, {kind}\n\nPtrInfo:\n\
             \tAddress: 0x7f00\n\tSize: 0x1000\n\t\t0x55\n\tIn block: 0x7f00, 0x1000\n\
             app: runtime.cpp:1276: Assertion `false && \"GPU memory access fault.\"' failed."
            )
        };
        let (a, b) = (
            without_memory_map(&report("System")),
            without_memory_map(&report("VRAM")),
        );
        assert_eq!(a, b);
        assert!(a.starts_with("Memory access fault by GPU node-1"), "{a}");
        assert!(a.ends_with("failed."), "{a}");
        assert_eq!(a.lines().count(), 2, "{a}");
    }
}
