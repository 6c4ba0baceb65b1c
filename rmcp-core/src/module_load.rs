//! What the shim does with a code object a process loads from memory (`hipModuleLoadData`,
//! `hipModuleLoadDataEx`, issue 34): given `RMCP_BUFFER_DESCRIPTORS`, `RMCP_MODE`, what
//! `buffer_descriptors` found in the image and the GPU it loads on, forward the image as it
//! is, forward it and say what to do, or forward a private copy with the broken descriptor
//! literals fixed. Pure: the shim gathers the facts, reads and copies the image, logs and
//! counts (`rmcp-shim/src/module_load.rs`).
//!
//! Only a gfx1010-gfx1013 device is changed for, and only for an image the scan found
//! broken (the scan flags gfx1010-gfx1013 code objects only): another GPU, an unknown one,
//! a clean or unreadable image all go through as they are.
//!
//! The same hooks fix in place, under `RMCP_OVERRIDE_FIXES`, the gfx103x code a
//! gfx1010-gfx1013 card runs under `HSA_OVERRIDE_GFX_VERSION` ([`override_action`],
//! `rmcp_core::gfx101x::in_place_fixes`, issue 40).

use crate::config::{BufferDescriptors, Mode, OverrideFixes};
use crate::gfx::Gfx;

/// gfx1010-gfx1013 (RDNA1): the GPUs whose buffer instructions drop Triton's layout.
pub fn is_rdna1(gfx: Gfx) -> bool {
    (100100..=100103).contains(&gfx.0)
}

/// The GPU a module loads on, as far as the shim knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadDevice {
    /// A gfx1010-gfx1013 (its real ISA, from the KFD topology).
    Rdna1,
    /// Any other GPU.
    Other,
    /// Not known (no topology, no answer from the runtime).
    Unknown,
}

/// The device a module loads on, from the GPUs of the KFD topology (their real ISAs, in any
/// order) and, only when they differ in kind, `current`: the ISA of the calling thread's
/// current device (None: not known). `current` is not called otherwise.
pub fn load_device(gpus: &[Gfx], current: impl FnOnce() -> Option<Gfx>) -> LoadDevice {
    let rdna1 = gpus.iter().filter(|g| is_rdna1(**g)).count();
    match (gpus.len(), rdna1) {
        (0, _) => LoadDevice::Unknown,
        (n, r) if n == r => LoadDevice::Rdna1,
        (_, 0) => LoadDevice::Other,
        _ => match current() {
            Some(g) if is_rdna1(g) => LoadDevice::Rdna1,
            Some(_) => LoadDevice::Other,
            None => LoadDevice::Unknown,
        },
    }
}

/// What the scan of an image found, as the decision needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scanned {
    /// Not an image the decoder reads (truncated, malformed, too large, unreadable).
    Unreadable,
    /// No broken descriptor literal in any gfx1010-gfx1013 code object of it.
    Clean,
    /// At least one.
    Broken,
}

/// What to do with the load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadAction {
    /// Forward the caller's image, say nothing.
    Forward,
    /// Forward the caller's image and say what to do (`dry_run`: RMCP_MODE=dry-run turned a
    /// fix into this).
    Warn { dry_run: bool },
    /// Forward a private copy with the broken literals fixed.
    Fix,
}

/// The decision. `device` is asked only for a broken image, with the setting not `off`
/// (it may need a runtime query).
pub fn decide(
    setting: BufferDescriptors,
    mode: Mode,
    scanned: Scanned,
    device: impl FnOnce() -> LoadDevice,
) -> LoadAction {
    if setting == BufferDescriptors::Off || mode == Mode::Off || scanned != Scanned::Broken {
        return LoadAction::Forward;
    }
    if device() != LoadDevice::Rdna1 {
        return LoadAction::Forward;
    }
    match (setting, mode) {
        (BufferDescriptors::Warn, _) => LoadAction::Warn { dry_run: false },
        (_, Mode::DryRun) => LoadAction::Warn { dry_run: true },
        _ => LoadAction::Fix,
    }
}

/// Whether the shim reads the image at all: for the descriptors unless they are `off`, for
/// the in-place fixes only `under_override` (a gfx1010-gfx1013 card an override makes run
/// gfx103x code) unless they are `off`; never with RMCP_MODE=off (everything is forwarded
/// unchanged).
pub fn scans(
    setting: BufferDescriptors,
    overrides: OverrideFixes,
    under_override: bool,
    mode: Mode,
) -> bool {
    (setting != BufferDescriptors::Off || (overrides != OverrideFixes::Off && under_override))
        && mode != Mode::Off
}

/// What to do with the in-place fixes an image's gfx103x code has, on a gfx1010-gfx1013
/// card an override makes run it (`under_override`): as [`decide`] does for descriptors.
pub fn override_action(
    setting: OverrideFixes,
    mode: Mode,
    under_override: bool,
    fixes: usize,
) -> LoadAction {
    if setting == OverrideFixes::Off || mode == Mode::Off || !under_override || fixes == 0 {
        return LoadAction::Forward;
    }
    match (setting, mode) {
        (OverrideFixes::Warn, _) => LoadAction::Warn { dry_run: false },
        (_, Mode::DryRun) => LoadAction::Warn { dry_run: true },
        _ => LoadAction::Fix,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(name: &str) -> Gfx {
        Gfx::parse(name).unwrap()
    }

    #[test]
    fn rdna1_is_gfx1010_to_gfx1013() {
        for (name, want) in [
            ("gfx1010", true),
            ("gfx1011", true),
            ("gfx1012", true),
            ("gfx1013", true),
            ("gfx1030", false),
            ("gfx1014", false),
            ("gfx1100", false),
            ("gfx90a", false),
        ] {
            assert_eq!(is_rdna1(g(name)), want, "{name}");
        }
    }

    #[test]
    fn the_device_is_asked_only_on_a_mixed_machine() {
        let never = || -> Option<Gfx> { panic!("asked") };
        assert_eq!(load_device(&[], never), LoadDevice::Unknown);
        assert_eq!(load_device(&[g("gfx1010")], never), LoadDevice::Rdna1);
        assert_eq!(
            load_device(&[g("gfx1010"), g("gfx1012")], never),
            LoadDevice::Rdna1
        );
        assert_eq!(load_device(&[g("gfx1030")], never), LoadDevice::Other);
        assert_eq!(
            load_device(&[g("gfx1030"), g("gfx1100")], never),
            LoadDevice::Other
        );
        let mixed = [g("gfx1030"), g("gfx1010")];
        assert_eq!(
            load_device(&mixed, || Some(g("gfx1010"))),
            LoadDevice::Rdna1
        );
        assert_eq!(
            load_device(&mixed, || Some(g("gfx1030"))),
            LoadDevice::Other
        );
        assert_eq!(load_device(&mixed, || None), LoadDevice::Unknown);
    }

    #[test]
    fn the_decision_table() {
        use BufferDescriptors::{Fix, Off, Warn};
        use LoadAction::Forward;
        use LoadDevice::{Other, Rdna1, Unknown};
        use Scanned::{Broken, Clean, Unreadable};
        let warn = LoadAction::Warn { dry_run: false };
        let dry = LoadAction::Warn { dry_run: true };
        let fix = LoadAction::Fix;
        #[rustfmt::skip]
        let table: &[(BufferDescriptors, Mode, Scanned, LoadDevice, LoadAction)] = &[
            // The one case that changes the load, and its neighbours.
            (Fix, Mode::Auto, Broken, Rdna1, fix),
            (Fix, Mode::Force, Broken, Rdna1, fix),
            (Fix, Mode::DryRun, Broken, Rdna1, dry),
            (Fix, Mode::Off, Broken, Rdna1, Forward),
            (Warn, Mode::Auto, Broken, Rdna1, warn),
            (Warn, Mode::DryRun, Broken, Rdna1, warn),
            (Warn, Mode::Off, Broken, Rdna1, Forward),
            (Off, Mode::Auto, Broken, Rdna1, Forward),
            // Another GPU, or one not known: never.
            (Fix, Mode::Auto, Broken, Other, Forward),
            (Fix, Mode::Force, Broken, Other, Forward),
            (Fix, Mode::Auto, Broken, Unknown, Forward),
            (Warn, Mode::Auto, Broken, Other, Forward),
            // A clean or unreadable image: never.
            (Fix, Mode::Auto, Clean, Rdna1, Forward),
            (Fix, Mode::Auto, Unreadable, Rdna1, Forward),
            (Warn, Mode::Auto, Clean, Rdna1, Forward),
            (Warn, Mode::Auto, Unreadable, Rdna1, Forward),
        ];
        for (setting, mode, scanned, device, want) in table {
            let got = decide(*setting, *mode, *scanned, || *device);
            assert_eq!(got, *want, "{setting:?} {mode:?} {scanned:?} {device:?}");
        }
    }

    #[test]
    fn the_device_is_not_asked_unless_the_image_is_broken_and_the_switch_on() {
        let never = || -> LoadDevice { panic!("asked") };
        for scanned in [Scanned::Clean, Scanned::Unreadable] {
            assert_eq!(
                decide(BufferDescriptors::Fix, Mode::Auto, scanned, never),
                LoadAction::Forward
            );
        }
        assert_eq!(
            decide(BufferDescriptors::Off, Mode::Auto, Scanned::Broken, never),
            LoadAction::Forward
        );
        assert_eq!(
            decide(BufferDescriptors::Fix, Mode::Off, Scanned::Broken, never),
            LoadAction::Forward
        );
    }

    #[test]
    fn nothing_is_read_when_off() {
        let off = OverrideFixes::Off;
        assert!(scans(BufferDescriptors::Fix, off, true, Mode::Auto));
        assert!(scans(BufferDescriptors::Warn, off, false, Mode::DryRun));
        assert!(!scans(BufferDescriptors::Off, off, true, Mode::Auto));
        assert!(!scans(BufferDescriptors::Fix, off, true, Mode::Off));
    }

    #[test]
    fn override_fixes_table() {
        use LoadAction::*;
        for (setting, mode, under, fixes, want) in [
            (OverrideFixes::Fix, Mode::Auto, true, 2, Fix),
            (OverrideFixes::Fix, Mode::Force, true, 1, Fix),
            (
                OverrideFixes::Fix,
                Mode::DryRun,
                true,
                1,
                Warn { dry_run: true },
            ),
            (
                OverrideFixes::Warn,
                Mode::Auto,
                true,
                1,
                Warn { dry_run: false },
            ),
            (OverrideFixes::Off, Mode::Auto, true, 1, Forward),
            (OverrideFixes::Fix, Mode::Off, true, 1, Forward),
            (OverrideFixes::Fix, Mode::Auto, false, 1, Forward),
            (OverrideFixes::Fix, Mode::Auto, true, 0, Forward),
        ] {
            assert_eq!(
                override_action(setting, mode, under, fixes),
                want,
                "{setting:?} {mode:?} {under} {fixes}"
            );
        }
        assert!(scans(
            BufferDescriptors::Off,
            OverrideFixes::Fix,
            true,
            Mode::Auto
        ));
        assert!(!scans(
            BufferDescriptors::Off,
            OverrideFixes::Fix,
            false,
            Mode::Auto
        ));
        assert!(scans(
            BufferDescriptors::Fix,
            OverrideFixes::Off,
            false,
            Mode::Auto
        ));
        assert!(!scans(
            BufferDescriptors::Off,
            OverrideFixes::Off,
            true,
            Mode::Auto
        ));
        assert!(!scans(
            BufferDescriptors::Fix,
            OverrideFixes::Fix,
            true,
            Mode::Off
        ));
    }
}
