//! Running programs inside the Debian roots tests/compat/run builds and caches (the real
//! ROCm 5.7.1, 6.4.3 and 7.2.4 runtimes; `RMCP_COMPAT_CACHE`, default /var/cache/rmcp-compat
//! as in CI), from Rust tests: a private scratch directory inside the root that the files a
//! test needs are copied into, and commands run there with chroot, a clean environment and
//! /proc mounted in a mount namespace of their own (nothing stays mounted, nothing another
//! run of the root sees). Real Triton in the exp root (scripts/triton-root) is found here
//! too. Every missing piece is a skip with its reason (a failure where CI requires
//! prerequisites); not running as root is a plain skip.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where tests/compat/run keeps its roots: `RMCP_COMPAT_CACHE`, else /var/cache/rmcp-compat
/// (CI's), else the script's own default, target/compat.
pub fn compat_cache() -> PathBuf {
    if let Some(p) = std::env::var_os("RMCP_COMPAT_CACHE") {
        return PathBuf::from(p);
    }
    let ci = PathBuf::from("/var/cache/rmcp-compat");
    if ci.join("roots").is_dir() {
        return ci;
    }
    crate::repo().join("target/compat")
}

/// A root of tests/compat/run (`trixie`, `sid` or `exp`), when built and usable here (as
/// root): None after recording why.
pub fn compat_root(name: &str) -> Option<PathBuf> {
    if !is_root() {
        crate::skip(&format!(
            "the {name} compat root needs root (chroot, mount namespaces)"
        ));
        return None;
    }
    let root = compat_cache().join("roots").join(name);
    if !root.join(".rmcp-compat").is_file() {
        crate::missing(&format!(
            "no {name} compat root under {} (tests/compat/run builds it)",
            compat_cache().display()
        ));
        return None;
    }
    Some(root)
}

/// The exp root with real Triton installed (scripts/triton-root): the root, or None after
/// recording why.
pub fn triton_root() -> Option<PathBuf> {
    let root = compat_root("exp")?;
    if !root.join("opt/rmcp-triton/stamp").is_file()
        || !root.join("opt/rmcp-triton/venv/bin/python3").exists()
    {
        crate::missing(&format!(
            "no Triton in the exp compat root under {} (scripts/triton-root installs it)",
            compat_cache().display()
        ));
        return None;
    }
    Some(root)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and no side effects.
    unsafe { libc::geteuid() == 0 }
}

/// A scratch directory inside a root, removed when dropped: `inside` is its path as the
/// processes in the root see it, `host()` as this test sees it.
pub struct RootDir {
    root: PathBuf,
    /// The directory as seen inside the root (absolute, starting /tmp/).
    pub inside: PathBuf,
}

impl RootDir {
    /// A new empty directory under the root's /tmp.
    pub fn new(root: &Path, tag: &str) -> RootDir {
        let tmp = root.join("tmp");
        std::fs::create_dir_all(&tmp).expect("the root's /tmp");
        let dir = tempfile::Builder::new()
            .prefix(&format!("rmcp-{tag}-"))
            .tempdir_in(&tmp)
            .expect("a scratch directory in the root")
            .keep();
        let inside = Path::new("/tmp").join(dir.file_name().expect("a directory name"));
        RootDir {
            root: root.to_path_buf(),
            inside,
        }
    }

    /// The directory as this test sees it.
    pub fn host(&self) -> PathBuf {
        self.root
            .join(self.inside.strip_prefix("/").expect("absolute"))
    }

    /// Copies `file` (a file or a directory tree) in as `name`; its path inside the root.
    pub fn copy(&self, file: &Path, name: &str) -> PathBuf {
        let to = self.host().join(name);
        let st = Command::new("cp")
            .arg("-rL")
            .arg(file)
            .arg(&to)
            .status()
            .expect("cp");
        assert!(st.success(), "cp {} {}", file.display(), to.display());
        self.inside.join(name)
    }

    /// `program args...` in the root, in this directory, with only `env` set (PATH a plain
    /// one unless `env` names it, HOME this directory) and /proc mounted for it alone.
    pub fn command(&self, env: &[(&str, String)], program: &str, args: &[String]) -> Command {
        let mut cmd = Command::new("/usr/bin/unshare");
        cmd.args([
            "--mount",
            "--propagation",
            "private",
            "--",
            "/bin/sh",
            "-ec",
        ])
        .arg(
            "root=$1; dir=$2; shift 2; /bin/mount -t proc proc \"$root/proc\"; \
                 exec /usr/sbin/chroot \"$root\" /bin/sh -c \
                 'cd \"$0\" && exec /usr/bin/env -i \"$@\"' \"$dir\" \"$@\"",
        )
        .arg("sh")
        .arg(&self.root)
        .arg(&self.inside);
        if !env.iter().any(|(k, _)| *k == "PATH") {
            cmd.arg("PATH=/usr/bin:/bin");
        }
        cmd.arg(format!("HOME={}", self.inside.display()));
        for (k, v) in env {
            cmd.arg(format!("{k}={v}"));
        }
        cmd.arg(program).args(args);
        cmd
    }
}

impl Drop for RootDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.host());
    }
}
