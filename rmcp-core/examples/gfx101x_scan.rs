//! How fast `rmcp_core::gfx101x::scan_image` (card gfx1010) reads a large real gfx1030 code
//! object, beside LLVM's disassembler on the same object: `llvm-objdump -d --mcpu=gfx1030`
//! (LLVM 15, Debian's llvm-15; its output read and thrown away). One run, the two
//! interleaved, medians of several repetitions. benches/gfx101x_scan.sh runs it:
//!
//!     benches/gfx101x_scan.sh [REPS] [OBJECT]
//!
//! OBJECT is an AMDGPU ELF or offload bundle holding gfx103x code; by default the largest
//! gfx1030 entry of Debian's rocSPARSE (`librocsparse.so.0`'s `.hip_fatbin`, 13.6 MB in
//! librocsparse0 5.3), extracted. A figure, not a test: nothing here asserts on time.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rmcp_core::code_objects::{self as co, BundleFormat, FATBIN_SECTION, Partial, amdgpu};
use rmcp_core::gfx::Gfx;
use rmcp_core::gfx101x::scan_image;

const LLVM_OBJDUMP: &str = "/usr/lib/llvm-15/bin/llvm-objdump";
const ROCSPARSE: &str = "/usr/lib/x86_64-linux-gnu/librocsparse.so.0";

fn read_at(f: &std::fs::File, at: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0; len];
    std::os::unix::fs::FileExt::read_exact_at(f, &mut b, at).expect("read");
    b
}

/// The largest gfx1030 entry of a library's `.hip_fatbin` (plain bundles): (bundle index,
/// bytes).
fn largest_gfx1030(lib: &Path) -> Option<(usize, Vec<u8>)> {
    let f = std::fs::File::open(lib).ok()?;
    let section = co::find_section(&f, FATBIN_SECTION).ok()??;
    let fat = co::scan_fatbin(&f, section.offset, section.size);
    let mut best: Option<(usize, u64, usize)> = None;
    for (i, b) in fat.bundles.iter().enumerate() {
        if b.format != BundleFormat::Plain {
            continue;
        }
        let mut want = 4096;
        let entries = loop {
            match co::parse_bundle_header(&read_at(&f, b.offset, want)).ok()? {
                Partial::Complete(e) => break e,
                Partial::NeedBytes(n) => want = n.max(want * 2),
            }
        };
        for e in entries {
            if amdgpu::processor(&e.id) == "gfx1030"
                && best.is_none_or(|(_, _, len)| e.size as usize > len)
            {
                best = Some((i, b.offset + e.offset, e.size as usize));
            }
        }
    }
    let (i, at, len) = best?;
    Some((i, read_at(&f, at, len)))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let reps: usize = args
        .next()
        .map(|s| s.parse().expect("REPS: a number"))
        .unwrap_or(5)
        .max(1);
    let (what, image) = match args.next() {
        Some(p) => (p.clone(), std::fs::read(&p).expect("OBJECT")),
        None => match largest_gfx1030(Path::new(ROCSPARSE)) {
            Some((i, b)) => (
                format!("rocSPARSE .hip_fatbin bundle {i}, gfx1030 entry"),
                b,
            ),
            None => {
                println!("no {ROCSPARSE} (apt-get install librocsparse0): nothing measured");
                return;
            }
        },
    };
    let mb = image.len() as f64 / 1e6;

    // What the scan sees, once.
    let card = Gfx::parse("gfx1010").unwrap();
    let sites = scan_image(&image, card).expect("an AMDGPU image");
    let functions: Vec<_> = sites.objects.iter().flat_map(|o| &o.functions).collect();
    let instructions: usize = functions.iter().map(|f| f.instructions).sum();
    let code: usize = functions.iter().map(|f| f.len).sum();
    let undecodable = functions.iter().filter(|f| f.undecodable.is_some()).count();
    let code_mb = code as f64 / 1e6;
    let sites_found: usize = sites.counts().iter().sum();
    println!(
        "{what}: {} bytes ({code} bytes of code in {} functions); scan_image: {instructions} \
         instructions decoded, {undecodable} functions stopped undecodable, {sites_found} \
         sites",
        image.len(),
        functions.len()
    );

    // llvm-objdump reads a file; the bare ELF (a bundle's gfx1030 entry) goes to one.
    let objdump = Path::new(LLVM_OBJDUMP).is_file().then(|| {
        let o = &sites.objects[0];
        let file: PathBuf =
            std::env::temp_dir().join(format!("rmcp-gfx101x-scan-{}.o", std::process::id()));
        std::fs::write(&file, &image[o.at..o.at + o.len]).expect("write the object");
        file
    });
    if objdump.is_none() {
        println!("no {LLVM_OBJDUMP} (apt-get install llvm-15): scan_image alone");
    }

    let (mut scan, mut llvm) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let t = Instant::now();
        std::hint::black_box(scan_image(std::hint::black_box(&image), card).unwrap());
        scan.push(t.elapsed());
        if let Some(file) = &objdump {
            let t = Instant::now();
            let st = Command::new(LLVM_OBJDUMP)
                .args(["-d", "--mcpu=gfx1030"])
                .arg(file)
                .stdout(Stdio::null())
                .status()
                .expect("run llvm-objdump");
            llvm.push(t.elapsed());
            assert!(st.success());
        }
    }
    if let Some(file) = &objdump {
        let _ = std::fs::remove_file(file);
    }

    println!();
    println!("| {reps} runs, median (fastest) | seconds | MB/s of the object | MB/s of its code |");
    println!("|---|---:|---:|---:|");
    let row = |name: &str, v: &[Duration]| {
        let m = median(v.to_vec()).as_secs_f64();
        let f = v.iter().min().unwrap().as_secs_f64();
        println!(
            "| {name} | {m:.4} ({f:.4}) | {:.1} ({:.1}) | {:.1} ({:.1}) |",
            mb / m,
            mb / f,
            code_mb / m,
            code_mb / f
        );
    };
    row("`gfx101x::scan_image`, card gfx1010", &scan);
    if !llvm.is_empty() {
        row("`llvm-objdump -d --mcpu=gfx1030` (output discarded)", &llvm);
        println!(
            "\nscan_image is {:.0}x llvm-objdump's speed (medians)",
            median(llvm).as_secs_f64() / median(scan).as_secs_f64()
        );
    }
}
