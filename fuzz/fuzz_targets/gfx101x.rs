//! `rmcp_core::gfx10::decode` and `rmcp_core::gfx101x` on arbitrary bytes: the decoder at
//! every offset, `scan_code` on the bytes as one function's code (card, wave64 and WGP mode
//! from the first byte), and `scan_image` on the bytes as an image and inside a generated
//! gfx1030 code object (two functions). Never panic; a decoded instruction is 4 to 20 bytes
//! and never runs past the code; every offset a scan reports lies inside the code or image
//! it was given (a site inside its function); a function that stopped undecodable reports
//! no site. Seeds (fuzz/seeds/gfx101x): `rmcp check`'s kernels (src/field_check/kernels.hip)
//! and a one-line kernel built by `hipcc --genco --offload-arch=gfx1030`, each as the
//! offload bundle, the bare ELF and its `.text` alone (docs/reliability.md has the commands).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcp_core::buffer_descriptors::write;
use rmcp_core::gfx::Gfx;
use rmcp_core::gfx10;
use rmcp_core::gfx101x::{ImageSites, scan_code, scan_image};

fn check_decode(code: &[u8]) {
    for at in 0..code.len() {
        if let Ok(i) = gfx10::decode(code, at) {
            assert!((4..=20).contains(&i.len), "length {} at {at}", i.len);
            assert!(
                at + i.len <= code.len(),
                "{} bytes at {at} past {}",
                i.len,
                code.len()
            );
        }
    }
}

fn check_image(image: &[u8], sites: &ImageSites) {
    for o in &sites.objects {
        assert!(o.at + o.len <= image.len());
        if !o.gfx103x {
            assert!(o.functions.is_empty());
        }
        for f in &o.functions {
            assert!(f.at >= o.at && f.at + f.len <= o.at + o.len);
            let inside = |at: usize| at >= f.at && at < f.at + f.len;
            assert!(f.first.iter().flatten().all(|&a| inside(a)));
            assert!(f.first_otherwise.is_none_or(inside));
            assert!(f.instructions <= f.len / 4);
            for (n, first) in f.counts.iter().zip(&f.first) {
                assert_eq!(*n > 0, first.is_some());
            }
            if let Some(u) = f.undecodable {
                assert!(inside(u));
                assert_eq!(f.total(), 0);
                assert_eq!(f.otherwise, 0);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    check_decode(data);

    let flags = data.first().copied().unwrap_or(0);
    let card = Gfx(100100 + u32::from(flags & 3));
    let code = scan_code(data, card, flags & 4 != 0, flags & 8 != 0);
    assert!(code.instructions <= data.len() / 4);
    assert!(code.sites.iter().all(|s| s.at < data.len()));
    assert!(code.otherwise.iter().all(|o| o.at < data.len()));
    assert!(
        code.sites
            .windows(2)
            .all(|w| (w[0].at, w[0].bug) <= (w[1].at, w[1].bug))
    );
    if let Some(u) = code.undecodable {
        assert!(u < data.len());
        assert!(code.sites.is_empty() && code.otherwise.is_empty());
    }

    if let Ok(sites) = scan_image(data, card) {
        check_image(data, &sites);
    }

    // The bytes as the code of a gfx1030 object (whole, and split in two functions).
    let text = &data[..data.len() - data.len() % 4];
    let half = (text.len() / 8) * 4;
    let image = write::code_object(
        write::MACH_GFX1030,
        text,
        &[("a", 0, half), ("b", half, text.len() - half)],
    );
    let sites = scan_image(&image, card).expect("a well-formed code object scans");
    assert_eq!(sites.objects.len(), 1);
    assert!(sites.objects[0].gfx103x);
    check_image(&image, &sites);
});
