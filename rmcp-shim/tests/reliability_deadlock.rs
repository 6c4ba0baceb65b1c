//! Never hang (issue 13): a thread that finds the shim's state being built by another
//! thread must not wait for anything that may need the loader's lock. The shape: the
//! runtime is up; thread A makes the process's first hooked call while the main thread is
//! inside dlopen() of a library whose constructor calls hipHostMalloc (it holds the loader's
//! lock, and A's first call needs it). Without the shim both calls return at once; the shim
//! from before issue 12 hung here on every run (the program's alarm ends it after 10 s).

use std::collections::BTreeSet;
use std::process::Command;

use rmcp_testkit::*;

fn run(with_shim: bool) -> (Option<i32>, BTreeSet<String>) {
    let mut cmd = Command::new(ctor_deadlock());
    cmd.arg(ctor_lib())
        .env_clear()
        .env("LD_LIBRARY_PATH", fake_dir(6))
        .env("RMCP_SYSFS_ROOT", fixture("rdna1"));
    if with_shim {
        cmd.env("LD_PRELOAD", shim());
    }
    let out = cmd.output().expect("run ctor_deadlock");
    // The two threads print in either order.
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    (out.status.code(), lines)
}

#[test]
fn a_constructor_allocating_inside_dlopen_never_deadlocks_the_first_call() {
    let without = run(false);
    assert_eq!(without.0, Some(0));
    assert!(without.1.contains("done"), "{without:?}");
    for _ in 0..3 {
        assert_eq!(run(true), without, "the same answers, and no hang");
    }
}
