//! `cargo run -p rmcp-core --release --example gfx101x_sites -- FILE [gfx1010]`: the gfx101x
//! scan of one image (a bare AMDGPU ELF or a plain offload bundle), per function: the
//! sites of each bug and the instructions the card decodes otherwise.

use rmcp_core::gfx::Gfx;
use rmcp_core::gfx101x::{Bug, scan_image};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: gfx101x_sites FILE [gfx1010]");
        std::process::exit(2);
    };
    let card = args
        .get(2)
        .and_then(|c| Gfx::parse(c))
        .unwrap_or(Gfx(100100));
    let image = std::fs::read(path).unwrap_or_else(|e| {
        eprintln!("{path}: {e}");
        std::process::exit(1)
    });
    let t = std::time::Instant::now();
    let scan = match scan_image(&image, card) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(1)
        }
    };
    let secs = t.elapsed().as_secs_f64();
    for o in &scan.objects {
        println!(
            "{} at {:#x} ({} bytes) gfx103x={}",
            o.target, o.at, o.len, o.gfx103x
        );
        for f in &o.functions {
            let sites: Vec<String> = Bug::ALL
                .iter()
                .filter(|b| f.counts[b.index()] > 0)
                .map(|b| format!("{}={}", b.mattr(), f.counts[b.index()]))
                .collect();
            println!(
                "  {} insns={} otherwise={} undecodable={:?} {}",
                f.name.as_deref().unwrap_or("?"),
                f.instructions,
                f.otherwise,
                f.undecodable,
                sites.join(" ")
            );
        }
    }
    let total: usize = scan.counts().iter().sum();
    eprintln!(
        "{} bytes in {:.3} s ({:.1} MB/s), {} sites",
        image.len(),
        secs,
        image.len() as f64 / secs / 1e6,
        total
    );
}
