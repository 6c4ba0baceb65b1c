//! rmcp's own setup: the shim's RMCP_* settings as it would read them (`rmcp-config`),
//! whether LD_PRELOAD carries the shim (`ld-preload`), and where `rmcp run` would find
//! it (`shim`).
//!
//! As in every check, nothing here may panic on odd input (a malformed topology,
//! unreadable files, non-UTF-8 variables): what cannot be read is a finding, never a crash.

use std::path::Path;

use rmcp_core::config::{Config, Mode, VARIABLES};

use super::remedies;
use super::report::{Check, Finding, Remedy, Status};
use crate::{install, preload};

pub fn rmcp_config(cfg: &Config, out: &mut Vec<Finding>) {
    let targets: Vec<String> = cfg.targets.iter().map(|t| t.to_string()).collect();
    let status = match cfg.mode {
        Mode::Auto | Mode::Force => Status::Ok,
        Mode::DryRun | Mode::Off => Status::Info,
    };
    out.push(
        Finding::new(
            Check::RmcpConfig,
            status,
            format!(
                "RMCP_MODE={}; targets: {}; {} of the shim's {} RMCP_* variables set.",
                cfg.mode.as_str(),
                targets.join(", "),
                rmcp_vars_set(),
                VARIABLES.len()
            ),
        )
        .with("mode", cfg.mode.as_str())
        .with("targets", targets),
    );
    for w in &cfg.warnings {
        out.push(
            Finding::new(Check::RmcpConfig, Status::Warn, format!("{w}.")).remedy(Remedy::new(
                "Correct or unset the variable named: the shim ignores a value it does not \
                 understand and uses the default (docs/cli.md lists the accepted values; \
                 `rmcp run --help` shows them as options).",
            )),
        );
    }
}

fn rmcp_vars_set() -> usize {
    VARIABLES
        .iter()
        .filter(|v| std::env::var_os(v.name).is_some())
        .count()
}

pub fn ld_preload(out: &mut Vec<Finding>) {
    let shims = preload::shim_entries(std::env::var_os("LD_PRELOAD").as_deref());
    let f = match shims.as_slice() {
        [] => Finding::new(
            Check::LdPreload,
            Status::Info,
            "LD_PRELOAD does not carry librmcp_shim.so in this shell: start programs with \
             `rmcp run -- CMD` (or the container entrypoint).",
        ),
        [one] if Path::new(one).is_file() => Finding::new(
            Check::LdPreload,
            Status::Ok,
            format!("LD_PRELOAD carries the shim: {one}."),
        ),
        [one] => Finding::new(
            Check::LdPreload,
            Status::Warn,
            format!("LD_PRELOAD names {one}, which does not exist: ld.so ignores it."),
        )
        .remedy(remedies::use_rmcp_run()),
        many => Finding::new(
            Check::LdPreload,
            Status::Warn,
            format!(
                "LD_PRELOAD carries {} copies of the shim ({}): keep one (rmcp run does).",
                many.len(),
                many.join(", ")
            ),
        )
        .remedy(remedies::use_rmcp_run()),
    };
    out.push(f.with("shims", shims));
}

pub fn shim(out: &mut Vec<Finding>) {
    let search = install::SHIM.search_here(None);
    let f = match &search.found {
        Some(p) => {
            let place = search.found_place().unwrap_or("unknown");
            let body = install::shim_body(p);
            let f = if body.is_file() {
                Finding::new(
                    Check::Shim,
                    Status::Ok,
                    format!(
                        "rmcp run would preload {} (found: {place}; body: {}).",
                        p.display(),
                        body.display()
                    ),
                )
            } else {
                Finding::new(
                    Check::Shim,
                    Status::Error,
                    format!(
                        "rmcp run would preload {} (found: {place}), but its body {} is \
                         missing: the shim would pass every HIP call through unchanged. \
                         Install both files side by side.",
                        p.display(),
                        body.display()
                    ),
                )
                .remedy(
                    Remedy::new(format!(
                        "Put {} next to {} again (reinstall rmcp the way it was installed: \
                         the wheel, or both files from the release), or give --shim the path \
                         of a complete pair.",
                        body.file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default(),
                        p.display()
                    ))
                    .command("rmcp run --shim /path/to/librmcp_shim.so -- python3 train.py"),
                )
            };
            f.with("path", p.display().to_string())
                .with("found_in", place)
                .with("body", body.display().to_string())
        }
        None => Finding::new(
            Check::Shim,
            Status::Warn,
            format!(
                "rmcp run would not find librmcp_shim.so (looked at {}); give --shim PATH \
                 or set RMCP_SHIM.",
                search.describe_tried()
            ),
        )
        .remedy(
            Remedy::new(
                "Tell rmcp run where the shim is, or install it next to rmcp (the rmcp-rdna \
                 wheel does both).",
            )
            .command("export RMCP_SHIM=/path/to/librmcp_shim.so")
            .command("rmcp run --shim /path/to/librmcp_shim.so -- python3 train.py"),
        )
        .with("path", serde_json::Value::Null),
    };
    out.push(f);
}
