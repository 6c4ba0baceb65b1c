//! What the load-time fix adds to a `hipModuleLoadData` of a 100-kernel object (issue 34):
//! the steps `rmcp-shim/src/module_load.rs` takes for a broken gfx1010 image, timed alone.
//!
//!     cargo bench --bench module_load
//!
//! Builds with hipcc a gfx1010 code object of 100 kernels, each loading and storing through
//! a buffer descriptor with Triton's word 3 (`0x00027000`), and times, 200 times after a
//! warm-up, what the hook does before it forwards the call: the image's length from its
//! own headers read through `process_vm_readv` (as the shim reads it), the copy of the
//! image the same way, the scan, and the fixed copy. Prints the median, fastest and slowest
//! per load, and the counts the scan found. The decision and the bookkeeping around it are
//! a few comparisons and atomic adds, not timed. Without hipcc it says so and stops.
//!
//! A figure, not a test: nothing here asserts on time. docs/performance.md holds a run.

use std::time::{Duration, Instant};

use rmcp_core::buffer_descriptors::{fix_image, image_len, scan_image};

fn read_own(addr: usize, buf: &mut [u8]) -> bool {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` describes `buf`; the kernel reads `remote` from this process and fails
    // where it is not mapped.
    let got = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    usize::try_from(got).is_ok_and(|n| n == buf.len())
}

fn object(dir: &std::path::Path) -> Option<Vec<u8>> {
    let hipcc = ["/usr/bin/hipcc", "/opt/rocm/bin/hipcc"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())?;
    let mut kernels = String::new();
    for k in 0..100 {
        kernels.push_str(&format!(
            "extern \"C\" __global__ void k{k}(float *o, const float *in, int n) {{\n\
               int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
               raw_store(raw_load(rsrc(in, n * 4), i * 4, 0, 0) + {k}.0f, rsrc(o, n * 4), i * 4, 0, 0); }}\n"
        ));
    }
    rmcp_testkit::buffer_helpers_object(hipcc.as_ref(), dir, "k100", "0x00027000", &kernels)
}

fn main() {
    let dir = std::env::temp_dir().join(format!("rmcp-bench-module-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let Some(image) = object(&dir) else {
        println!("no hipcc (apt-get install hipcc): nothing measured");
        return;
    };
    let _ = std::fs::remove_dir_all(&dir);
    let base = image.as_ptr() as usize;
    let hook = || {
        let len = image_len(&mut |off: usize, buf: &mut [u8]| read_own(base + off, buf))
            .expect("the image's length");
        let mut bytes = vec![0u8; len];
        assert!(read_own(base, &mut bytes));
        let scan = scan_image(&bytes).expect("a code object");
        let fixed = fix_image(&bytes, &scan).expect("a fix");
        (scan, fixed.into_boxed_slice())
    };
    let (scan, _) = hook();
    let mut times: Vec<Duration> = (0..200)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(hook());
            t.elapsed()
        })
        .collect();
    times.sort();
    println!(
        "100-kernel gfx1010 object, {} bytes: {} kernels with findings, {} literals feeding {} buffer instructions",
        image.len(),
        scan.kernels_with_findings(),
        scan.literals(),
        scan.broken_buffer_instructions()
    );
    println!(
        "the hook's steps (length, copy, scan, fix) per load: median {:?}, fastest {:?}, slowest {:?} (200 loads)",
        times[100], times[0], times[199]
    );
}
