//! `rmcp_core::buffer_descriptors` on arbitrary bytes, as an image (`scan_image`,
//! `image_len`, `fix_image`) and as GFX10 machine code inside a gfx1010 code object (the
//! decoder and the data-flow). Never panic; every offset a scan reports lies inside the
//! image; `image_len` reads only through its reader; `fix_image` keeps the length and
//! changes nothing but the findings' literals, each to `fixed_word3` of the word found.
//! Seeds (fuzz/seeds/buffer_descriptors): code objects and bundles made with
//! `rmcp_core::buffer_descriptors::write` by `cargo test -p rmcp-core write_fuzz_seeds --
//! --ignored` (the table tests' cases, as objects and as bare code, and a bundle).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcp_core::buffer_descriptors::{
    ImageScan, fix_image, fixed_word3, image_len, scan_image, write,
};

fn check(image: &[u8]) {
    let len = image_len(&mut |at, buf| match at
        .checked_add(buf.len())
        .and_then(|end| image.get(at..end))
    {
        Some(b) => {
            buf.copy_from_slice(b);
            true
        }
        None => false,
    });
    if let Some(n) = len {
        assert!(n <= image.len());
    }
    let Ok(scan) = scan_image(image) else {
        return;
    };
    check_scan(image, &scan);
}

fn check_scan(image: &[u8], scan: &ImageScan) {
    for o in &scan.objects {
        assert!(o.at + o.len <= image.len());
        if let Some(u) = o.undecodable {
            assert!(u < image.len());
            assert!(o.findings.is_empty());
        }
        for f in &o.findings {
            assert!(f.literal_at + 4 <= image.len());
            assert_eq!(
                &image[f.literal_at..f.literal_at + 4],
                &f.word3.to_le_bytes()
            );
            assert!(!f.buffer_at.is_empty());
            assert!(f.buffer_at.iter().all(|&b| b + 8 <= image.len()));
        }
    }
    match fix_image(image, scan) {
        None => assert_eq!(scan.literals(), 0),
        Some(fixed) => {
            assert_eq!(fixed.len(), image.len());
            let mut allowed = vec![false; image.len()];
            for (_, f) in scan.findings() {
                allowed[f.literal_at..f.literal_at + 4].fill(true);
                assert_eq!(
                    &fixed[f.literal_at..f.literal_at + 4],
                    &fixed_word3(f.word3).to_le_bytes()
                );
            }
            for i in 0..image.len() {
                assert!(allowed[i] || fixed[i] == image[i], "byte {i} changed");
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    // The bytes as a kernel's code in a gfx1010 object (whole, and split in two functions).
    let text = &data[..data.len() - data.len() % 4];
    let half = (text.len() / 8) * 4;
    let image = write::code_object(
        write::MACH_GFX1010,
        text,
        &[("a", 0, half), ("b", half, text.len() - half)],
    );
    let scan = scan_image(&image).expect("a well-formed code object scans");
    assert_eq!(scan.objects.len(), 1);
    check_scan(&image, &scan);
});
