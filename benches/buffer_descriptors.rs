//! What the buffer-descriptor scan and fix cost for a 100-kernel gfx1010 code object: the
//! work the shim's load hook adds to a hipModuleLoadData of such an image
//! (`rmcp_core::buffer_descriptors`: `image_len` from the headers, `scan_image`, and
//! `fix_image` when something is found).
//!
//!     cargo bench --bench buffer_descriptors
//!
//! The object is built here by hipcc (`--genco --offload-arch=gfx1010 -O2`): 100 kernels,
//! each loading and storing through raw buffer descriptors whose word 3 is Triton's RDNA1
//! layout (`0x00027000`), so every kernel has a finding and the fix rewrites 100 literals;
//! and the same with the RDNA layout Composable Kernel uses (`0x31014000`), where the scan
//! finds nothing. Each is
//! timed as hipcc writes it (an offload bundle) and as the bare ELF inside it (what Triton
//! hands over). Each figure: the median of 200 runs after 20 warm-up runs, and the fastest.
//! Without hipcc it says so and exits 0.
//!
//! A figure, not a test: nothing here asserts on time. docs/performance.md holds a run.

use std::time::{Duration, Instant};

use rmcp_core::buffer_descriptors::{fix_image, image_len, scan_image};

const KERNELS: usize = 100;

/// The kernels after rmcp_testkit's buffer-descriptor helpers.
fn kernels() -> String {
    let mut s = String::from(
        r#"#define K(n) extern "C" __global__ void k##n(float *out, const float *a, const float *b, int len) { \
    int i = blockIdx.x * blockDim.x + threadIdx.x;                                              \
    float x = raw_load(rsrc(a, len * 4), i * 4, 0, 0);                                          \
    float y = raw_load(rsrc(b, len * 4), i * 4, 0, 0);                                          \
    raw_store(x * (float)n + y, rsrc(out, len * 4), i * 4, 0, 0);                               \
}
"#,
    );
    for n in 0..KERNELS {
        s += &format!("K({n})\n");
    }
    s
}

fn build(dir: &std::path::Path, word3: &str) -> Option<Vec<u8>> {
    let hipcc = std::env::var_os("HIPCC").unwrap_or("hipcc".into());
    rmcp_testkit::buffer_helpers_object(&hipcc, dir, &format!("k-{word3}"), word3, &kernels())
}

fn time(mut f: impl FnMut()) -> (Duration, Duration) {
    for _ in 0..20 {
        f();
    }
    let mut v: Vec<Duration> = (0..200)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    v.sort();
    (v[v.len() / 2], v[0])
}

fn report(what: &str, image: &[u8]) {
    let scan = scan_image(image).unwrap();
    let kernels: usize = scan.objects.iter().map(|o| o.kernels).sum();
    println!(
        "{what}: {} bytes, {kernels} kernels, {} literals to fix (feeding {} buffer instructions)",
        image.len(),
        scan.literals(),
        scan.broken_buffer_instructions()
    );
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let (m, f) = time(|| {
        let n = image_len(&mut |at, buf| match image.get(at..at + buf.len()) {
            Some(b) => {
                buf.copy_from_slice(b);
                true
            }
            None => false,
        });
        assert_eq!(n, Some(image.len()));
    });
    println!(
        "  image_len            median {:8.1} us   fastest {:8.1} us",
        us(m),
        us(f)
    );
    let (m, f) = time(|| {
        std::hint::black_box(scan_image(std::hint::black_box(image)).unwrap());
    });
    println!(
        "  scan_image           median {:8.1} us   fastest {:8.1} us",
        us(m),
        us(f)
    );
    let (m, f) = time(|| {
        let s = scan_image(image).unwrap();
        std::hint::black_box(fix_image(image, &s));
    });
    println!(
        "  scan_image+fix_image median {:8.1} us   fastest {:8.1} us",
        us(m),
        us(f)
    );
}

fn main() {
    let dir = std::env::temp_dir().join(format!("rmcp-bench-bd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for word3 in ["0x00027000", "0x31014000"] {
        let Some(bundle) = build(&dir, word3) else {
            println!("no hipcc (or it failed): nothing measured");
            let _ = std::fs::remove_dir_all(&dir);
            return;
        };
        report(
            &format!("{KERNELS}-kernel gfx1010 bundle, word 3 {word3}"),
            &bundle,
        );
        let scan = scan_image(&bundle).unwrap();
        let o = &scan.objects[0];
        report(
            &format!("{KERNELS}-kernel gfx1010 bare ELF, word 3 {word3}"),
            &bundle[o.at..o.at + o.len],
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
