//! `rmcp kernel install`: a Jupyter kernel spec that starts ipykernel with the shim
//! preloaded, for notebooks, where nobody sets LD_PRELOAD.
//!
//! The spec is the one ipykernel would install for the chosen Python (its `argv`,
//! `language`, `metadata` and logos, from `ipykernel.kernelspec`), with `env` carrying
//! `LD_PRELOAD=<the shim>` and the display name marked. Jupyter starts the kernel with that
//! environment, so the kernel process and its children load the shim before any HIP
//! library. Python does the Jupyter part ([`SCRIPT`]): where a spec goes (`jupyter_core`'s
//! paths) and what it holds are Jupyter's own answers for that Python, not a copy of them.
//!
//! The Python: `--python`, else a `python3` next to rmcp (a venv's `bin/`, where pip puts
//! the rmcp script), else `python3` on PATH. `python -m rmcp_rdna kernel install` passes
//! the running interpreter as `--python`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `rmcp kernel ...`
#[derive(clap::Args, Debug)]
pub struct KernelArgs {
    #[command(subcommand)]
    command: KernelCommand,
}

#[derive(clap::Subcommand, Debug)]
enum KernelCommand {
    /// Write a Jupyter kernel spec that starts ipykernel with librmcp_shim.so preloaded.
    Install(InstallArgs),
}

#[derive(clap::Args, Debug)]
struct InstallArgs {
    /// The spec's directory name (what `jupyter kernelspec list` shows).
    #[arg(long, default_value = "rmcp", value_parser = parse_name)]
    name: String,
    /// Install for this user, in Jupyter's data directory (the default).
    #[arg(long, conflicts_with = "sys_prefix")]
    user: bool,
    /// Install into the Python's prefix (sys.prefix/share/jupyter), e.g. a venv's.
    #[arg(long)]
    sys_prefix: bool,
    /// Replace a spec of the same name.
    #[arg(long)]
    force: bool,
    /// The Python whose ipykernel the spec starts (default: python3 next to rmcp, else
    /// python3 on PATH).
    #[arg(long, value_name = "PATH")]
    python: Option<PathBuf>,
    /// Path of librmcp_shim.so (default: as `rmcp run` finds it).
    #[arg(long, value_name = "PATH")]
    shim: Option<PathBuf>,
}

/// A kernel name as Jupyter accepts one: ASCII letters, digits, `-`, `.`, `_`.
fn parse_name(s: &str) -> Result<String, String> {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
    {
        Ok(s.to_string())
    } else {
        Err("use ASCII letters, digits, '-', '.' and '_'".to_string())
    }
}

/// Exit statuses of [`SCRIPT`] besides 0 and Python's own 1.
const NO_IPYKERNEL: i32 = 3;
const EXISTS: i32 = 4;

/// Run by the chosen Python with `name where force shim` as arguments; prints the spec's
/// directory. Exits with [`NO_IPYKERNEL`] or [`EXISTS`] (the directory printed).
const SCRIPT: &str = r#"
import json, os, shutil, sys
name, where, force, shim = sys.argv[1:5]
try:
    from ipykernel.kernelspec import RESOURCES, get_kernel_dict
    from jupyter_core.paths import jupyter_data_dir
except ImportError as e:
    print(f"{sys.executable}: {e}", file=sys.stderr)
    sys.exit(3)
base = jupyter_data_dir() if where == "user" else os.path.join(sys.prefix, "share", "jupyter")
dest = os.path.join(base, "kernels", name)
if os.path.exists(dest):
    if force != "1":
        print(dest)
        sys.exit(4)
    shutil.rmtree(dest)
spec = get_kernel_dict()
spec["display_name"] = spec.get("display_name", "Python 3") + " with rmcp"
env = dict(spec.get("env") or {})
env["LD_PRELOAD"] = shim
spec["env"] = env
shutil.copytree(RESOURCES, dest)
with open(os.path.join(dest, "kernel.json"), "w") as f:
    json.dump(spec, f, indent=1)
    f.write("\n")
print(dest)
"#;

/// The Python to ask: `explicit`, else python3 next to the rmcp executable, else python3.
fn python(explicit: Option<&Path>) -> PathBuf {
    if let Some(p) = explicit {
        return p.to_path_buf();
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join("python3")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("python3"))
}

/// Runs `rmcp kernel ...`; returns the exit status.
pub fn main(args: KernelArgs) -> u8 {
    match args.command {
        KernelCommand::Install(a) => install_spec(a),
    }
}

fn install_spec(a: InstallArgs) -> u8 {
    let shim = match crate::run::shim_for_preload(a.shim.as_deref()) {
        Ok(p) => p,
        Err(_) => return 1,
    };
    // The spec outlives this shell: name the file, not a path through `..` or a link that
    // may move.
    let shim = std::fs::canonicalize(&shim).unwrap_or(shim);
    let python = python(a.python.as_deref());
    let where_ = if a.sys_prefix { "sys-prefix" } else { "user" };
    let out = Command::new(&python)
        .arg("-c")
        .arg(SCRIPT)
        .arg(&a.name)
        .arg(where_)
        .arg(if a.force { "1" } else { "0" })
        .arg(&shim)
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            eprintln!("rmcp: cannot run {}: {e}", python.display());
            return 1;
        }
    };
    let dest = String::from_utf8_lossy(&out.stdout).trim().to_string();
    match out.status.code() {
        Some(0) => {
            println!(
                "Installed kernel spec {:?} in {dest}: {} -m ipykernel_launcher with \
                 LD_PRELOAD={}",
                a.name,
                python.display(),
                shim.display()
            );
            0
        }
        Some(EXISTS) => {
            eprintln!(
                "rmcp: a kernel spec named {:?} exists at {dest}; give --force to replace it \
                 (or --name for another)",
                a.name
            );
            1
        }
        Some(NO_IPYKERNEL) => {
            eprintln!(
                "rmcp: {} cannot import ipykernel ({}); install it there (pip install \
                 ipykernel) or give --python",
                python.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
            1
        }
        _ => {
            eprintln!(
                "rmcp: writing the kernel spec with {} failed:\n{}",
                python.display(),
                String::from_utf8_lossy(&out.stderr).trim_end()
            );
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names() {
        assert!(parse_name("rmcp").is_ok());
        assert!(parse_name("py3.11-rmcp_x").is_ok());
        assert!(parse_name("").is_err());
        assert!(parse_name("a/b").is_err());
        assert!(parse_name("a b").is_err());
    }
}
