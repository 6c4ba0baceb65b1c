//! Which GPUs are in the machine: the KFD topology reader.
//!
//! The answer comes from the real hardware, as the kernel's KFD topology describes it
//! (`/sys/class/kfd/kfd/topology/nodes/N/properties`), never from what HIP reports:
//! HSA_OVERRIDE_GFX_VERSION changes HIP's answer but not the silicon. Which of them rmcp
//! treats as affected is `classify`'s business, not this module's.

use std::path::{Path, PathBuf};

use rmcp_sys::PciAddress;

use crate::gfx::Gfx;

/// Whether the platform lets this GPU do PCIe AtomicOps, from its io_links flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PcieAtomics {
    Supported,
    /// The kernel marked a link "no 32-bit / no 64-bit atomics" (kfd_set_iolink_no_atomics).
    Unsupported,
    Unknown,
}

/// io_link flag bits (amdkfd `CRAT_IOLINK_FLAGS_*`).
pub mod link_flags {
    pub const ENABLED: u64 = 0x1;
    pub const NON_COHERENT: u64 = 0x2;
    pub const NO_ATOMICS_32_BIT: u64 = 0x4;
    pub const NO_ATOMICS_64_BIT: u64 = 0x8;
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoLink {
    pub index: u32,
    pub link_type: Option<u64>,
    pub node_to: Option<u64>,
    pub flags: Option<u64>,
}

/// A GPU node of the KFD topology.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuNode {
    pub node: u32,
    /// Gfx(0) when the node does not say.
    pub gfx: Gfx,
    pub pci: Option<PciAddress>,
    pub vendor_id: Option<u64>,
    pub device_id: Option<u64>,
    pub io_links: Vec<IoLink>,
}

impl GpuNode {
    pub fn pcie_atomics(&self) -> PcieAtomics {
        let flags: Vec<u64> = self.io_links.iter().filter_map(|l| l.flags).collect();
        if flags.is_empty() {
            PcieAtomics::Unknown
        } else if flags
            .iter()
            .any(|f| f & (link_flags::NO_ATOMICS_32_BIT | link_flags::NO_ATOMICS_64_BIT) != 0)
        {
            PcieAtomics::Unsupported
        } else {
            PcieAtomics::Supported
        }
    }
}

/// What was read from a topology root.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Topology {
    pub root: PathBuf,
    pub cpu_nodes: u32,
    pub gpus: Vec<GpuNode>,
    /// Lines and files that could not be understood; reading goes on past them.
    pub problems: Vec<String>,
}

/// The `name value` lines of a KFD properties file. Values are unsigned decimal; anything
/// else is a problem, reported and skipped. The first occurrence of a name wins.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Properties {
    pub values: Vec<(String, u64)>,
    pub problems: Vec<String>,
}

impl Properties {
    pub fn parse(text: &str) -> Properties {
        Properties::parse_keys(text, None)
    }

    /// Like `parse`, keeping only the names in `keys` (None: every name); other lines are
    /// skipped without being examined.
    pub fn parse_keys(text: &str, keys: Option<&[&str]>) -> Properties {
        let mut p = Properties::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim_ascii();
            if line.is_empty() {
                continue;
            }
            if let Some(keys) = keys {
                let name = line.split_ascii_whitespace().next().unwrap_or("");
                if !keys.contains(&name) {
                    continue;
                }
            }
            let mut it = line.split_ascii_whitespace();
            let (Some(name), Some(value), None) = (it.next(), it.next(), it.next()) else {
                p.problems
                    .push(format!("line {}: not `name value`: {line:?}", n + 1));
                continue;
            };
            let Ok(value) = value.parse::<u64>() else {
                p.problems.push(format!(
                    "line {}: {name}: not an unsigned number: {value:?}",
                    n + 1
                ));
                continue;
            };
            if p.get(name).is_some() {
                p.problems.push(format!(
                    "line {}: {name} repeated; the first value is used",
                    n + 1
                ));
                continue;
            }
            p.values.push((name.to_owned(), value));
        }
        p
    }

    pub fn get(&self, name: &str) -> Option<u64> {
        self.values.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }
}

/// Numbered subdirectories of `dir`, sorted by number.
fn numbered_dirs(dir: &Path) -> std::io::Result<Vec<(u32, PathBuf)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if let Some(n) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        {
            out.push((n, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// Files larger than this are not KFD properties files.
const MAX_PROPERTIES_BYTES: u64 = 64 * 1024;

/// The node properties the shim's classification uses.
const CLASSIFY_KEYS: &[&str] = &["simd_count", "gfx_target_version", "domain", "location_id"];

/// O_NONBLOCK on the Linux targets where it is 0o4000 (0 elsewhere: the type checks below
/// are then the only guard). rmcp-core declares no FFI and does not depend on libc; a
/// test checks the value against libc's.
const O_NONBLOCK: i32 = if cfg!(all(
    target_os = "linux",
    any(
        target_arch = "x86_64",
        target_arch = "x86",
        target_arch = "aarch64",
        target_arch = "arm",
        target_arch = "riscv64",
        target_arch = "powerpc64",
        target_arch = "s390x",
        target_arch = "loongarch64"
    )
)) {
    0o4000
} else {
    0
};

/// Opens a properties file for reading, only if it is a regular file (what sysfs serves).
/// Anything else (a FIFO, a device) is refused before it is opened: opening a FIFO for
/// reading waits for a writer, which would hang the first HIP call of the process. The
/// open itself is non-blocking too, and the type checked again on the open file, in case
/// the path changed in between.
fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let not_regular = || std::io::Error::other("not a regular file");
    if !std::fs::metadata(path)?.is_file() {
        return Err(not_regular());
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(not_regular());
    }
    Ok(file)
}

fn read_properties(
    path: &Path,
    keys: Option<&[&str]>,
    problems: &mut Vec<String>,
) -> Option<Properties> {
    let file = open_regular(path)
        .map_err(|e| problems.push(format!("{}: {e}", path.display())))
        .ok()?;
    // sysfs files are at most a page: read them in one or two calls.
    let mut text = String::with_capacity(4096);
    use std::io::Read;
    if let Err(e) = file.take(MAX_PROPERTIES_BYTES).read_to_string(&mut text) {
        problems.push(format!("{}: {e}", path.display()));
        return None;
    }
    let props = Properties::parse_keys(&text, keys);
    problems.extend(
        props
            .problems
            .iter()
            .map(|m| format!("{}: {m}", path.display())),
    );
    Some(props)
}

impl Topology {
    /// Reads `root/nodes/*` with each GPU's io_links. An error means there is no readable
    /// topology at all.
    pub fn read(root: &Path) -> std::io::Result<Topology> {
        Topology::read_with(root, true)
    }

    /// Reads the nodes only: what the shim needs to classify GPUs (io_links say whether
    /// PCIe atomics work, which `rmcp doctor` reports but no rewrite depends on).
    pub fn read_gpus(root: &Path) -> std::io::Result<Topology> {
        Topology::read_with(root, false)
    }

    fn read_with(root: &Path, links: bool) -> std::io::Result<Topology> {
        let mut topo = Topology {
            root: root.to_path_buf(),
            ..Topology::default()
        };
        for (node, dir) in numbered_dirs(&root.join("nodes"))? {
            let Some(props) = read_properties(
                &dir.join("properties"),
                (!links).then_some(CLASSIFY_KEYS),
                &mut topo.problems,
            ) else {
                continue;
            };
            if props.get("simd_count").unwrap_or(0) == 0 {
                if props.values.is_empty() {
                    topo.problems
                        .push(format!("node {node}: properties file is empty"));
                } else {
                    topo.cpu_nodes += 1;
                }
                continue;
            }
            let gfx = match props.get("gfx_target_version") {
                Some(v) if v > 0 && v < u64::from(u32::MAX) => Gfx(v as u32),
                _ => {
                    topo.problems.push(format!(
                        "node {node}: GPU without a usable gfx_target_version"
                    ));
                    Gfx(0)
                }
            };
            let pci = match (props.get("domain"), props.get("location_id")) {
                (Some(d), Some(l)) if d <= u64::from(u32::MAX) && l <= 0xffff => {
                    Some(PciAddress::from_kfd(d as u32, l as u32))
                }
                _ => {
                    topo.problems
                        .push(format!("node {node}: GPU without a usable PCI location"));
                    None
                }
            };
            let mut io_links = Vec::new();
            let link_dirs = if links {
                numbered_dirs(&dir.join("io_links")).unwrap_or_default()
            } else {
                Vec::new()
            };
            {
                for (index, ldir) in link_dirs {
                    if let Some(lp) =
                        read_properties(&ldir.join("properties"), None, &mut topo.problems)
                    {
                        io_links.push(IoLink {
                            index,
                            link_type: lp.get("type"),
                            node_to: lp.get("node_to"),
                            flags: lp.get("flags"),
                        });
                    }
                }
            }
            topo.gpus.push(GpuNode {
                node,
                gfx,
                pci,
                vendor_id: props.get("vendor_id"),
                device_id: props.get("device_id"),
                io_links,
            });
        }
        Ok(topo)
    }

    /// The GPU node at a PCI address.
    pub fn gpu_at(&self, pci: PciAddress) -> Option<&GpuNode> {
        self.gpus.iter().find(|g| g.pci == Some(pci))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_parse_skips_garbage() {
        let p = Properties::parse(
            "simd_count 40\n\nnovalue\ngfx_target_version 100100\nbig 99999999999999999999\n\
             neg -1\nsimd_count 80\n  location_id\t768  \nthree words here\n",
        );
        assert_eq!(p.get("simd_count"), Some(40));
        assert_eq!(p.get("gfx_target_version"), Some(100100));
        assert_eq!(p.get("location_id"), Some(768));
        assert_eq!(p.get("big"), None);
        assert_eq!(p.get("neg"), None);
        assert_eq!(p.problems.len(), 5, "{:?}", p.problems);
    }

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn reads_a_small_tree() {
        let dir = std::env::temp_dir().join(format!("rmcp-topo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        write(
            &dir,
            "nodes/0/properties",
            "cpu_cores_count 8\nsimd_count 0\n",
        );
        write(
            &dir,
            "nodes/1/properties",
            "simd_count 40\ngfx_target_version 100100\ndomain 0\nlocation_id 768\nvendor_id 4098\ndevice_id 29471\n",
        );
        write(
            &dir,
            "nodes/1/io_links/0/properties",
            "type 2\nnode_to 0\nflags 13\n",
        );
        write(
            &dir,
            "nodes/10/properties",
            "simd_count 96\ngfx_target_version 110000\ndomain 1\nlocation_id 2560\n",
        );
        write(&dir, "nodes/10/io_links/0/properties", "flags 1\n");
        write(&dir, "nodes/2/properties", "");
        let t = Topology::read(&dir).unwrap();
        assert_eq!(t.cpu_nodes, 1);
        assert_eq!(t.gpus.len(), 2);
        assert_eq!(t.gpus[0].node, 1);
        assert_eq!(t.gpus[0].gfx.to_string(), "gfx1010");
        assert_eq!(t.gpus[0].pci.unwrap().to_string(), "0000:03:00.0");
        assert_eq!(t.gpus[0].pcie_atomics(), PcieAtomics::Unsupported);
        assert_eq!(t.gpus[1].node, 10, "numeric, not lexical, order");
        assert_eq!(t.gpus[1].pci.unwrap().to_string(), "0001:0a:00.0");
        assert_eq!(t.gpus[1].pcie_atomics(), PcieAtomics::Supported);
        assert_eq!(t.problems.len(), 1, "{:?}", t.problems);
        let pci = PciAddress::parse("0001:0a:00.0").unwrap();
        assert_eq!(t.gpu_at(pci).unwrap().node, 10);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn mkfifo(p: &Path) {
        use std::os::unix::ffi::OsStrExt;
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo with a NUL-terminated path (a test-only dependency on libc).
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    #[test]
    fn the_nonblocking_flag_is_libcs() {
        assert_eq!(O_NONBLOCK, libc::O_NONBLOCK);
    }

    /// A FIFO where a properties file should be (no writer: opening it for reading would
    /// wait forever) is a problem, not a hang; the rest of the tree is read.
    #[test]
    fn fifos_are_refused_without_waiting() {
        let dir = std::env::temp_dir().join(format!("rmcp-topo-fifo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        write(
            &dir,
            "nodes/1/properties",
            "simd_count 40\ngfx_target_version 100100\ndomain 0\nlocation_id 768\n",
        );
        mkfifo(&dir.join("nodes/1/io_links/0/properties"));
        mkfifo(&dir.join("nodes/2/properties"));
        let (tx, rx) = std::sync::mpsc::channel();
        let root = dir.clone();
        std::thread::spawn(move || {
            let _ = tx.send((Topology::read(&root), Topology::read_gpus(&root)));
        });
        let (full, gpus) = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("reading a topology with FIFOs hung");
        for t in [full.unwrap(), gpus.unwrap()] {
            assert_eq!(t.gpus.len(), 1);
            assert_eq!(t.gpus[0].gfx.to_string(), "gfx1010");
            assert!(
                t.problems
                    .iter()
                    .any(|p| p.contains("nodes/2/properties: not a regular file")),
                "{:?}",
                t.problems
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn parse_keys_keeps_only_those_and_checks_only_those() {
        let text = "simd_count 40\njunk line here\nlocation_id 768\nhive_id 99999999999999999999\nlocation_id 5\n";
        let p = Properties::parse_keys(text, Some(CLASSIFY_KEYS));
        assert_eq!(
            p.values,
            [("simd_count".into(), 40), ("location_id".into(), 768)]
        );
        assert_eq!(
            p.problems.len(),
            1,
            "only the repeated kept key: {:?}",
            p.problems
        );
        assert_eq!(Properties::parse(text).problems.len(), 3);
    }

    #[test]
    fn missing_root_is_an_error() {
        assert!(Topology::read(Path::new("/nonexistent/rmcp/topology")).is_err());
    }
}

#[cfg(test)]
mod fixture_tests {
    //! The committed KFD fixtures (tests/fixtures/) read through the same parser.
    use super::*;

    fn read(name: &str) -> Topology {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures")
            .join(name);
        Topology::read(&root).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    fn summary(t: &Topology) -> Vec<(String, String, PcieAtomics)> {
        t.gpus
            .iter()
            .map(|g| {
                (
                    g.gfx.to_string(),
                    g.pci.map_or_else(|| "none".into(), |p| p.to_string()),
                    g.pcie_atomics(),
                )
            })
            .collect()
    }

    #[test]
    fn every_fixture_reads_as_its_readme_says() {
        use PcieAtomics::*;
        let s = |g: &str, p: &str, a| (g.to_string(), p.to_string(), a);
        let table = [
            ("rdna1", 1, vec![s("gfx1010", "0000:03:00.0", Unsupported)]),
            ("rdna2", 1, vec![s("gfx1031", "0000:03:00.0", Supported)]),
            ("rdna3", 1, vec![s("gfx1100", "0000:03:00.0", Supported)]),
            (
                "mixed",
                1,
                vec![
                    s("gfx1010", "0000:03:00.0", Unsupported),
                    s("gfx1100", "0000:0a:00.0", Supported),
                ],
            ),
            ("cpu-only", 1, vec![]),
            (
                "two-cpu-mixed-domain",
                2,
                vec![
                    s("gfx1031", "0001:41:00.0", Unsupported),
                    s("gfx1100", "0000:c1:00.0", Supported),
                ],
            ),
        ];
        for (name, cpus, gpus) in table {
            let t = read(name);
            assert_eq!(t.cpu_nodes, cpus, "{name}");
            assert_eq!(summary(&t), gpus, "{name}");
            assert!(t.problems.is_empty(), "{name}: {:?}", t.problems);
        }
        let eight = read("eight-gpu");
        assert_eq!(eight.gpus.len(), 8);
        assert!(eight.gpus.iter().all(|g| g.gfx == Gfx(100300)));
        let addrs: Vec<String> = eight
            .gpus
            .iter()
            .map(|g| g.pci.unwrap().to_string())
            .collect();
        assert_eq!(addrs[7], "0000:18:00.0");
    }

    #[test]
    fn malformed_fixture_reads_what_it_can_and_reports_the_rest() {
        let t = read("malformed");
        assert_eq!(t.cpu_nodes, 1);
        // Node 1: garbage around good keys; node 2: no gfx_target_version.
        assert_eq!(t.gpus.len(), 2, "{:?}", t.gpus);
        assert_eq!(t.gpus[0].node, 1);
        assert_eq!(t.gpus[0].gfx.to_string(), "gfx1010");
        assert_eq!(t.gpus[0].pci.unwrap().to_string(), "0000:03:00.0");
        assert_eq!(
            t.gpus[0].pcie_atomics(),
            PcieAtomics::Unknown,
            "flags notanumber"
        );
        assert_eq!(t.gpus[1].gfx, Gfx(0));
        let all = t.problems.join("\n");
        for needle in [
            "not an unsigned number",
            "repeated",
            "gfx_target_version",
            "empty",
            "No such file",
        ] {
            assert!(
                all.contains(needle),
                "no problem mentioning {needle:?}:\n{all}"
            );
        }
    }
}
