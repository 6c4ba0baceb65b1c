//! Stress with exact accounting: 8 threads x 1,000,000 hooked calls spread over every hook,
//! the fake runtime answering success, out-of-memory and invalid value in a pattern
//! (FAKEHIP_PATTERN=mod4, by size). Afterwards three independent accounts must agree to the
//! call: what the runtime received (FAKEHIP_COUNTS, counted inside the runtime), what the
//! callers got back (the client's tallies) and the shim's stats report, each against a
//! model of what the shim does on the rdna1 fixture (rmcp-testkit/src/stress_model.rs).

#[test]
fn eight_threads_a_million_calls_each_agree_to_the_call() {
    let a = rmcp_testkit::stress_model::stress(8, 1_000_000);
    eprintln!(
        "stress: {} calls checked, {} runtime answers were faults (out of memory or invalid value), {} runtime calls, {} fallbacks",
        a.calls, a.faults, a.runtime_calls, a.fallbacks
    );
}
