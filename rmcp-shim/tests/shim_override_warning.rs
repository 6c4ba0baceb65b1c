//! The shim's warning about HSA_OVERRIDE_GFX_VERSION: once per process, on the first
//! hooked call, at the default log level, when the override makes an affected GPU (KFD
//! fixtures) run another family's code; the variable as the process holds it then, so a
//! value the program sets itself before its first HIP call is seen. Nothing for a
//! same-family override, an unaffected card, a process that never calls HIP, or with
//! RMCP_LOG=off. The probe (examples/hip_probe.c) runs against the fake runtime.

use rmcp_testkit::{Out, Run};

fn warnings(out: &Out) -> Vec<&str> {
    out.stderr_lines("HSA_OVERRIDE_GFX_VERSION")
}

#[test]
fn once_per_process_at_the_default_level() {
    let out = Run::probe(6)
        .env("HSA_OVERRIDE_GFX_VERSION", "10.3.0")
        .args(["hipHostMalloc", "hipHostMalloc", "hipMalloc"])
        .run();
    out.assert_success();
    let w = warnings(&out);
    assert_eq!(w.len(), 1, "{}", out.stderr);
    for part in [
        " warn: ",
        "HSA_OVERRIDE_GFX_VERSION=10.3.0",
        "node 1 (gfx1010)",
        "gfx1030 code",
        "rmcp doctor",
    ] {
        assert!(w[0].contains(part), "{part} in {}", w[0]);
    }
    // The calls themselves are served as always.
    assert_eq!(out.count("hipHostMalloc"), 2);
}

#[test]
fn an_override_the_program_sets_before_its_first_call_is_seen() {
    let out = Run::probe(6)
        .args(["setenv:HSA_OVERRIDE_GFX_VERSION=10.3.0", "hipHostMalloc"])
        .run();
    out.assert_success();
    assert_eq!(warnings(&out).len(), 1, "{}", out.stderr);
    // Set after the first call: the warning has been decided by then.
    let out = Run::probe(6)
        .args([
            "hipHostMalloc",
            "setenv:HSA_OVERRIDE_GFX_VERSION=10.3.0",
            "hipHostMalloc",
        ])
        .run();
    out.assert_success();
    assert!(warnings(&out).is_empty(), "{}", out.stderr);
}

#[test]
fn the_per_node_variable_counts() {
    let out = Run::probe(6)
        .env("HSA_OVERRIDE_GFX_VERSION_1", "10.3.0")
        .args(["hipMalloc"])
        .run();
    out.assert_success();
    let w = warnings(&out);
    assert_eq!(w.len(), 1, "{}", out.stderr);
    assert!(w[0].contains("HSA_OVERRIDE_GFX_VERSION=10.3.0"), "{}", w[0]);
}

#[test]
fn silent_when_the_override_is_harmless_or_not_ours_to_judge() {
    for (fixture, value, vars, steps) in [
        // Same family: gfx1031 runs gfx1030 code of the same instruction set.
        ("rdna2", "10.3.0", vec![], vec!["hipHostMalloc"]),
        // The card's own value.
        ("rdna1", "10.1.0", vec![], vec!["hipHostMalloc"]),
        // Not an affected card.
        ("rdna3", "10.3.0", vec![], vec!["hipHostMalloc"]),
        // Silenced.
        (
            "rdna1",
            "10.3.0",
            vec![("RMCP_LOG", "off")],
            vec!["hipHostMalloc"],
        ),
        // No HIP call at all: the shim does nothing.
        ("rdna1", "10.3.0", vec![], vec!["maps"]),
        // Not a value libhsakmt accepts (the doctor reports that one).
        ("rdna1", "ten", vec![], vec!["hipHostMalloc"]),
    ] {
        let mut run = Run::probe(6)
            .fixture(fixture)
            .env("HSA_OVERRIDE_GFX_VERSION", value);
        for (k, v) in &vars {
            run = run.env(k, v);
        }
        let out = run.args(steps.clone()).run();
        out.assert_success();
        assert!(
            warnings(&out).is_empty(),
            "{fixture} {value} {vars:?} {steps:?}: {}",
            out.stderr
        );
    }
}
