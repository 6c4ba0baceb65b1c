//! `rmcp report`: everything a field report needs, in one command, as Markdown on stdout
//! (`--json`: the same as one object): rmcp's version and commit, the system (kernel,
//! amdgpu module, distribution), the PyTorch builds and HIP runtimes doctor found, the
//! doctor's findings, the result of `rmcp check` (run in a child process unless
//! `--no-check`), and with `--stats FILE` the `faults` a crashed run left in its stats file.
//! The stats file is checked before anything else runs (`input`, `rmcp_core::stats_file`:
//! a regular file of at most 1 MiB, JSON, each field the type the shim writes, each string,
//! list and nesting cut to what rmcp prints, and the report says what was cut); a file that
//! cannot be used ends the command with status 2 and a sentence naming it.
//!
//! Private details are redacted by default (the home directory becomes `~`, the user name
//! `<user>`, the host name `<host>`), in every section, the check's and doctor's output
//! included; the report says so at the top. `--no-redact` keeps them. Nothing here needs
//! root: it reads what any user can read, and the check runs as the user.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};

use rmcp_core::stats_file;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::build_info;
use crate::input;

/// The options of `rmcp report`.
#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// Print one JSON object instead of Markdown.
    #[arg(long)]
    pub json: bool,
    /// Do not run `rmcp check` (its section says it was not run).
    #[arg(long)]
    pub no_check: bool,
    /// Keep the home directory, user name and host name as they are.
    #[arg(long)]
    pub no_redact: bool,
    /// The stats file (RMCP_STATS_FILE) of a run that crashed: its `faults` go in the report.
    #[arg(long, value_name = "FILE")]
    pub stats: Option<PathBuf>,
    /// The HIP runtime for the check (as `rmcp check --runtime`).
    #[arg(long, value_name = "PATH")]
    pub runtime: Option<PathBuf>,
    /// Seconds each of the check's runs may take.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub timeout: u64,
}

/// What is replaced, and by what: (what it is, its value here, the replacement).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redaction {
    pub rules: Vec<(&'static str, String, &'static str)>,
}

impl Redaction {
    /// This machine's home directory, user name(s) and host name.
    pub fn here() -> Redaction {
        let mut rules = Vec::new();
        let mut homes: Vec<String> = std::env::var("HOME").into_iter().collect();
        let mut users: Vec<String> = ["USER", "LOGNAME"]
            .iter()
            .filter_map(|v| std::env::var(v).ok())
            .collect();
        // SAFETY: getpwuid returns NULL or a pointer to a static record; its strings are
        // read before any other passwd call.
        unsafe {
            let pw = libc::getpwuid(libc::getuid());
            if !pw.is_null() {
                for (p, list) in [((*pw).pw_dir, &mut homes), ((*pw).pw_name, &mut users)] {
                    if !p.is_null() {
                        list.push(std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned());
                    }
                }
            }
        }
        for h in homes {
            let h = h.trim_end_matches('/').to_string();
            // "/" as a home is no private detail, and replacing it would mangle every path.
            if h.len() > 1 {
                rules.push(("home directory", h, "~"));
            }
        }
        // `root` is no private detail, and a word the report uses ("topology root").
        for u in users.into_iter().filter(|u| !u.is_empty() && u != "root") {
            rules.push(("user name", u, "<user>"));
        }
        let mut buf = [0u8; 256];
        // SAFETY: the buffer and its length; gethostname NUL-terminates within it (or
        // truncates, which the position search below tolerates).
        if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0 {
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            let host = String::from_utf8_lossy(&buf[..end]).into_owned();
            if !host.is_empty() && !host.starts_with("localhost") {
                if let Some((short, _)) = host.split_once('.') {
                    rules.push(("host name", host.clone(), "<host>"));
                    rules.push(("host name", short.to_string(), "<host>"));
                } else {
                    rules.push(("host name", host, "<host>"));
                }
            }
        }
        // Longest first, so that a home containing the user name goes whole; no repeats.
        rules.sort_by_key(|r| std::cmp::Reverse(r.1.len()));
        rules.dedup_by(|a, b| a.1 == b.1);
        Redaction { rules }
    }

    /// `text` with every rule applied, each value only where it stands whole (not inside a
    /// longer word or path component: a user `ann` leaves `channel` and `/home/anna`
    /// alone).
    pub fn apply(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (_, value, with) in &self.rules {
            out = replace_bounded(&out, value, with);
        }
        out
    }

    /// "home directory (~), user name (<user>), host name (<host>)".
    pub fn describe(&self) -> String {
        let mut kinds: Vec<String> = Vec::new();
        for (what, _, with) in &self.rules {
            let k = format!("{what} (shown as `{with}`)");
            if !kinds.contains(&k) {
                kinds.push(k);
            }
        }
        kinds.join(", ")
    }
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '-'
}

/// Replaces `from` by `to` where no word character touches it on either side.
fn replace_bounded(text: &str, from: &str, to: &str) -> String {
    if from.is_empty() {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(from) {
        let prev = match rest[..i].chars().next_back() {
            Some(c) => Some(c),
            None => out.chars().next_back(),
        };
        let before_ok = prev.is_none_or(|c| !is_word(c));
        let tail = &rest[i + from.len()..];
        let after_ok = tail.chars().next().is_none_or(|c| !is_word(c));
        out.push_str(&rest[..i]);
        if before_ok && after_ok {
            out.push_str(to);
        } else {
            out.push_str(from);
        }
        rest = tail;
    }
    out.push_str(rest);
    out
}

/// A small file's trimmed text, or None (`input`: a regular file, never blocking, capped).
fn read(path: &str) -> Option<String> {
    let s = input::read_head(Path::new(path), input::SMALL_FILE_BYTES).ok()?;
    let s = s.trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// The system: kernel release, amdgpu module, distribution.
fn system() -> Value {
    let module_root = std::env::var_os("RMCP_MODULE_ROOT")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/sys/module"));
    let amdgpu = module_root.join("amdgpu");
    let amdgpu_text = if !amdgpu.exists() {
        "not loaded".to_string()
    } else {
        match read(&amdgpu.join("version").to_string_lossy()) {
            // A DKMS (out-of-tree) amdgpu has a version; the in-kernel one has none.
            Some(v) => format!("{v} (out-of-tree, {})", module_root.display()),
            None => "loaded, in-kernel (no version file: the kernel's own amdgpu)".to_string(),
        }
    };
    let os = read("/etc/os-release").and_then(|t| {
        t.lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME="))
            .map(|v| v.trim_matches('"').to_string())
    });
    json!({
        "kernel": read("/proc/sys/kernel/osrelease"),
        "kernel_version": read("/proc/sys/kernel/version"),
        "amdgpu": amdgpu_text,
        "distribution": os,
        "machine": std::env::consts::ARCH,
    })
}

/// Runs `rmcp check --json` as a child process; its JSON (or why there is none).
fn run_check(args: &ReportArgs) -> Value {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return json!({ "not_run": format!("cannot find the rmcp executable: {e}") }),
    };
    let mut a: Vec<OsString> = vec!["check".into(), "--json".into()];
    a.push("--timeout".into());
    a.push(args.timeout.to_string().into());
    if let Some(r) = &args.runtime {
        a.push("--runtime".into());
        a.push(r.clone().into_os_string());
    }
    let child = Command::new(exe)
        .args(&a)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return json!({ "not_run": format!("cannot start rmcp check: {e}") }),
    };
    let (mut out, mut err) = (String::new(), String::new());
    let mut so = child.stdout.take().expect("piped");
    let mut se = child.stderr.take().expect("piped");
    let t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    let _ = so.read_to_string(&mut out);
    // The check kills its own runs after --timeout; this bounds the rest.
    let limit = Duration::from_secs(args.timeout.saturating_mul(2) + 60);
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s.code(),
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    err.push_str(&t.join().unwrap_or_default());
    match serde_json::from_str::<Value>(&out) {
        Ok(v) => v,
        Err(_) => json!({
            "not_run": format!("rmcp check gave no JSON (exit status {status:?})"),
            "stderr": err,
        }),
    }
}

/// The `faults` and `buffer_descriptors` (what the load-time fix saw and did) of a stats
/// file, checked (`rmcp_core::stats_file`: the types of the fields
/// the shim writes, every string, list and nesting capped; keys it does not know kept, the
/// format may grow), read through `input` (a regular file, never blocking, at most
/// `stats_file::MAX_FILE_BYTES`). Err: the sentence saying why the file cannot be used.
fn faults(path: &Path) -> Result<Value, String> {
    let bytes = input::read_capped(path, stats_file::MAX_FILE_BYTES, "a stats file")
        .map_err(|p| p.to_string())?;
    let checked = stats_file::parse(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(json!({
        "file": path.display().to_string(),
        "faults": checked.faults,
        "buffer_descriptors": checked.buffer_descriptors,
        "override_fixes": checked.override_fixes,
        "cut": checked.cut,
    }))
}

/// At most this many of the places something was cut are listed.
const CUTS_LISTED: usize = 20;

/// A JSON value as Markdown text: strings bare, the rest as JSON.
fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// A table cell: no pipes, no newlines.
fn cell(v: &Value) -> String {
    plain(v).replace('|', "\\|").replace('\n', " ")
}

fn markdown(report: &Value, doctor_text: &str) -> String {
    let mut s = String::new();
    let r = report;
    s += "# rmcp field report\n\n";
    s += &format!("{}\n\n", plain(&r["redaction"]));
    s += "## rmcp\n\n";
    s += &format!(
        "- version: {}\n- commit: {}\n\n",
        plain(&r["rmcp"]["version"]),
        plain(&r["rmcp"]["commit"])
    );
    s += "## System\n\n";
    for (k, label) in [
        ("kernel", "kernel"),
        ("kernel_version", "kernel build"),
        ("amdgpu", "amdgpu module"),
        ("distribution", "distribution"),
        ("machine", "machine"),
    ] {
        s += &format!("- {label}: {}\n", plain(&r["system"][k]));
    }
    s += "\n## PyTorch and HIP runtimes\n\n";
    let found = r["pytorch_and_runtimes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if found.is_empty() {
        s += "doctor found no PyTorch and no HIP runtime finding.\n";
    }
    for f in &found {
        s += &format!(
            "- [{}] {}: {}\n",
            plain(&f["status"]),
            plain(&f["check"]),
            plain(&f["message"])
        );
    }
    let check = &r["check"];
    s += "\n## rmcp check\n\n";
    if let Some(why) = check.get("not_run") {
        s += &format!("Not run: {}\n", plain(why));
    } else if check.get("verdict").is_some_and(Value::is_null) {
        s += &format!("Could not run: {}\n", plain(&check["error"]));
    } else {
        s += &format!(
            "- verdict: **{}** (exit status {})\n- {}\n- runtime: {} ({}, HIP {})\n- device: {}\n- kfd: {}\n- rewrites: {}\n\n",
            plain(&check["verdict"]),
            plain(&check["exit_status"]),
            plain(&check["sentence"]),
            plain(&check["runtime"]["path"]),
            plain(&check["runtime"]["chosen_by"]),
            plain(&check["runtime"]["version"]),
            plain(&check["device"]),
            plain(&check["kfd"]),
            plain(&check["rewrites"]),
        );
        s += "| placement | flags without rmcp | flags with rmcp | without rmcp | with rmcp |\n";
        s += "|---|---|---|---|---|\n";
        let runs = [&check["runs"]["without_rmcp"], &check["runs"]["with_rmcp"]];
        let n = runs[0]["placements"].as_array().map_or(0, Vec::len);
        for i in 0..n {
            let p = |run: &Value| run["placements"][i].clone();
            let flags = |run: &Value| match &p(run)["flags"] {
                Value::Null => "-".to_string(),
                f => format!("{} -> {}", plain(&f["asked"]), plain(&f["runtime"])),
            };
            let results = |run: &Value| {
                p(run)["results"]
                    .as_object()
                    .map(|o| {
                        o.iter()
                            .map(|(op, v)| match v.get("error") {
                                Some(e) => format!("{op} error {}", plain(e)),
                                None => format!("{op} {}/{}", plain(&v["bad"]), plain(&v["total"])),
                            })
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                    .unwrap_or_default()
            };
            s += &format!(
                "| {} | {} | {} | {} | {} |\n",
                cell(&p(runs[0])["name"]),
                flags(runs[0]),
                flags(runs[1]),
                results(runs[0]).replace('|', "\\|"),
                results(runs[1]).replace('|', "\\|"),
            );
        }
        // The buffer-layout experiment (Triton's RDNA1 descriptor layout; docs/field-check.md).
        let b = &check["buffer_layout"];
        if !b.is_null() {
            let counts = |run: &str, k: &str| match &b[run][k] {
                Value::Null => "-".to_string(),
                c => format!(
                    "written {}/{} read {}/{}",
                    plain(&c["written"]),
                    plain(&c["total"]),
                    plain(&c["read"]),
                    plain(&c["total"])
                ),
            };
            s += &format!(
                "\n- buffer layout: **{}**\n- {}\n\n| buffer kernel | without rmcp | with rmcp |\n|---|---|---|\n",
                plain(&b["verdict"]),
                plain(&b["sentence"]),
            );
            for (name, k) in [
                ("Triton's RDNA1 layout (0x00027000)", "triton_rdna1_layout"),
                ("RDNA layout (0x31027000)", "rdna_layout"),
                ("plain global stores (control)", "global_control"),
            ] {
                s += &format!(
                    "| {name} | {} | {} |\n",
                    counts("without_rmcp", k),
                    counts("with_rmcp", k)
                );
            }
        }
        // The override experiments (gfx1030 code on an RX 5000; docs/cli.md, `rmcp check`).
        let o = &check["override_bugs"];
        if o["run"] == false {
            s += &format!(
                "\n- override experiments: not run: {}\n",
                plain(&o["not_run"])
            );
        } else if o["run"] == true {
            s += &format!(
                "\n- override experiments: HSA_OVERRIDE_GFX_VERSION={}, gfx1030 code on this {}\n",
                plain(&o["hsa_override_gfx_version"]),
                plain(&o["card"]),
            );
            for (name, k) in [("flat offset", "flat_offset"), ("legacy FMA", "fma_legacy")] {
                s += &format!(
                    "- override {name}: **{}**\n- {}\n",
                    plain(&o[k]["verdict"]),
                    plain(&o[k]["sentence"]),
                );
            }
        }
        s += "\n<details><summary>rmcp check --json</summary>\n\n```json\n";
        s += &serde_json::to_string_pretty(check).unwrap_or_default();
        s += "\n```\n\n</details>\n";
    }
    s += "\n## Faults\n\n";
    match &r["faults"] {
        Value::Null => {
            s += "No stats file given (`rmcp report --stats FILE` adds the faults a crashed run recorded).\n"
        }
        f => match f["faults"].as_array() {
            None => {
                s += &format!(
                    "{}: the stats file has no `faults` array.\n",
                    plain(&f["file"])
                )
            }
            Some(list) if list.is_empty() => {
                s += &format!("{}: no faults recorded.\n", plain(&f["file"]))
            }
            Some(list) => {
                s += &format!("{} fault(s) in {}:\n\n", list.len(), plain(&f["file"]));
                for (i, fault) in list.iter().enumerate() {
                    s += &format!("{}.", i + 1);
                    match fault.as_object() {
                        Some(o) => {
                            s += "\n";
                            for (k, v) in o {
                                s += &format!("   - {k}: {}\n", plain(v));
                            }
                        }
                        None => s += &format!(" {}\n", plain(fault)),
                    }
                }
            }
        },
    }
    if let Some(cut) = r["faults"]["cut"].as_array().filter(|c| !c.is_empty()) {
        let mut listed: Vec<String> = cut.iter().take(CUTS_LISTED).map(plain).collect();
        if cut.len() > CUTS_LISTED {
            listed.push(format!("and {} more", cut.len() - CUTS_LISTED));
        }
        s += &format!(
            "\nrmcp cut what is longer than it prints ({} bytes of a field, {} items of a list): {}.\n",
            stats_file::MAX_TEXT_BYTES,
            stats_file::MAX_ITEMS,
            listed.join("; ")
        );
    }
    s += &code_objects(&r["faults"]);
    s += "\n## rmcp doctor\n\n```text\n";
    s += doctor_text.trim_end();
    s += "\n```\n";
    s
}

/// The section on the code objects the run loaded, from the stats file's
/// `buffer_descriptors` (nothing without a readable stats file: the Faults section says why).
fn code_objects(stats: &Value) -> String {
    if stats.is_null() {
        return String::new();
    }
    let mut s = String::from("\n## Code objects loaded\n\n");
    let b = &stats["buffer_descriptors"];
    if !b.is_object() {
        s += &format!(
            "{}: the stats file has no `buffer_descriptors` (written by an rmcp without the \
             load-time fix).\n",
            plain(&stats["file"])
        );
        return s;
    }
    let n = |k: &str| b[k].as_u64().unwrap_or(0);
    s += &format!(
        "Code objects loaded from memory or by file name (`hipModuleLoadData`, \
         `hipModuleLoadDataEx`, `hipModuleLoad`) and scanned for buffer descriptors that \
         gfx1010-gfx1013 drop (Triton's buffer ops; `RMCP_BUFFER_DESCRIPTORS`): {} scanned, \
         {} unreadable, {} broken, {} fixed ({} instructions), {} loaded as they were with a \
         warning, {} fixed copies refused by the runtime and loaded as they were.\n",
        n("scanned"),
        n("unreadable"),
        n("broken"),
        n("fixed"),
        n("instructions_fixed"),
        n("warned"),
        n("fallbacks")
    );
    let o = &stats["override_fixes"];
    if o.is_object() {
        let n = |k: &str| o[k].as_u64().unwrap_or(0);
        s += &format!(
            "\nUnder `HSA_OVERRIDE_GFX_VERSION` on a gfx1010-gfx1013 card, gfx103x code fixed in \
             place (`s_inst_prefetch` and `s_clause` around an NSA image instruction became \
             `s_nop 0`; `RMCP_OVERRIDE_FIXES`): {} code objects fixed ({} instructions), {} \
             loaded as they were with a warning; of the fat binaries registered at start-up, \
             {} read and {} left as they were (a bound, a compressed bundle that does not say \
             its size, GPUs that would load different entries).\n",
            n("fixed"),
            n("instructions_fixed"),
            n("warned"),
            n("fat_binaries"),
            n("fat_binaries_left")
        );
    }
    s
}

/// Runs `rmcp report`; its exit status is 0 unless the report could not be written (125)
/// or an option names a file rmcp cannot use (2, before anything else is done).
pub fn main(args: ReportArgs) -> u8 {
    let faults = match args.stats.as_deref().map(faults).transpose() {
        Ok(f) => f,
        Err(why) => {
            eprintln!("rmcp report: --stats {why}");
            return input::EXIT_USAGE;
        }
    };
    if let Some(Err(p)) = args.runtime.as_deref().map(input::regular_file) {
        eprintln!("rmcp report: --runtime {p}");
        return input::EXIT_USAGE;
    }
    // The doctor's gfx101x scan may show progress, but never over the JSON or into a pipe.
    let progress = !args.json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let (doctor_text, doctor) = crate::doctor::for_report(progress).unwrap_or_else(|| {
        (
            "rmcp doctor failed (see the message above)".into(),
            Value::Null,
        )
    });
    let found: Vec<Value> = doctor["findings"]
        .as_array()
        .map(|fs| {
            fs.iter()
                .filter(|f| matches!(f["check"].as_str(), Some("gfx-override" | "pytorch" | "triton" | "hip-runtime")))
                .map(|f| json!({ "check": f["check"], "status": f["status"], "message": f["message"] }))
                .collect()
        })
        .unwrap_or_default();
    let check = if args.no_check {
        json!({ "not_run": "--no-check" })
    } else {
        run_check(&args)
    };
    let redaction = (!args.no_redact).then(Redaction::here);
    let redaction_text = match &redaction {
        Some(r) if !r.rules.is_empty() => format!(
            "Redacted: {}. `rmcp report --no-redact` keeps them.",
            r.describe()
        ),
        Some(_) => "Redacted: nothing (no home directory, user or host name was found).".into(),
        None => "Not redacted (--no-redact): home directory, user name and host name appear as they are.".into(),
    };
    let report = json!({
        "redaction": redaction_text,
        "rmcp": { "version": build_info::VERSION, "commit": build_info::commit() },
        "system": system(),
        "pytorch_and_runtimes": found,
        "check": check,
        "faults": faults,
        "doctor": doctor,
    });
    let text = if args.json {
        serde_json::to_string_pretty(&report).unwrap_or_default() + "\n"
    } else {
        markdown(&report, &doctor_text)
    };
    let text = match &redaction {
        Some(r) => r.apply(&text),
        None => text,
    };
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => 0,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            eprintln!("rmcp report: cannot write the report: {e}");
            crate::run::EXIT_FAILED
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(rules: &[(&'static str, &str, &'static str)]) -> Redaction {
        Redaction {
            rules: rules
                .iter()
                .map(|(a, b, c)| (*a, b.to_string(), *c))
                .collect(),
        }
    }

    #[test]
    fn home_user_and_host_are_replaced_whole() {
        let red = r(&[
            ("home directory", "/home/ann", "~"),
            ("user name", "ann", "<user>"),
            ("host name", "box", "<host>"),
        ]);
        assert_eq!(
            red.apply("/home/ann/venv/lib /home/anna/x ann@box channel boxes /srv/ann/"),
            "~/venv/lib /home/anna/x <user>@<host> channel boxes /srv/<user>/"
        );
        assert_eq!(red.apply("\"/home/ann\""), "\"~\"");
        assert!(red.describe().contains("home directory (shown as `~`)"));
    }

    #[test]
    fn here_never_replaces_the_root_directory_nor_root() {
        let red = Redaction::here();
        assert!(
            red.rules
                .iter()
                .all(|(_, v, _)| v != "/" && v != "root" && !v.is_empty())
        );
    }
}
