//! Table tests of the scan on hand-built code objects.

use super::*;

#[test]
fn word3_layouts() {
    assert!(is_broken_word3(0x0002_7000));
    assert_eq!(fixed_word3(0x0002_7000), 0x3102_7000);
    assert!(!is_broken_word3(0x3102_7000));
    assert!(!is_broken_word3(0x3101_4000));
    assert_eq!(fixed_word3(0x3101_4000), 0x3101_4000);
}
