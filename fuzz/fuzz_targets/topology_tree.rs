//! `Topology::read` and `Topology::read_gpus` on a KFD tree written from the input: never
//! panic, never report more GPUs than nodes, and agree on the GPUs' classification.
//!
//! Input: chunks separated by 0xff. Chunk 0 is `nodes/0/properties`, chunk 1
//! `nodes/0/io_links/0/properties`, chunk 2 `nodes/1/properties`, and so on (at most four
//! nodes); a chunk starting with 0xfe is left out (no such file).
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use rmcp_core::topology::Topology;

fn root() -> &'static PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        base.join(format!("rmcp-fuzz-topology-{}", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    let root = root();
    let _ = std::fs::remove_dir_all(root);
    let nodes = root.join("nodes");
    std::fs::create_dir_all(&nodes).unwrap();
    let mut written_nodes = 0;
    for (i, chunk) in data.split(|b| *b == 0xff).take(8).enumerate() {
        let node = nodes.join((i / 2).to_string());
        let path = if i % 2 == 0 {
            node.join("properties")
        } else {
            node.join("io_links/0/properties")
        };
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        if i % 2 == 0 {
            written_nodes += 1;
        }
        if chunk.first() == Some(&0xfe) {
            continue;
        }
        std::fs::write(&path, chunk).unwrap();
    }
    let full = Topology::read(root).expect("the nodes directory exists");
    let gpus = Topology::read_gpus(root).expect("the nodes directory exists");
    assert!(full.gpus.len() + full.cpu_nodes as usize <= written_nodes);
    assert_eq!(full.gpus.len(), gpus.gpus.len());
    for (a, b) in full.gpus.iter().zip(&gpus.gpus) {
        assert_eq!((a.node, a.gfx, a.pci), (b.node, b.gfx, b.pci));
        assert!(b.io_links.is_empty());
        let _ = a.pcie_atomics();
        let _ = a.gfx.to_string();
    }
});
