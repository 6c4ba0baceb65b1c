// The LD_PRELOAD merge rule as a table: (LD_PRELOAD before, LD_PRELOAD the command gets),
// `S` standing for the shim's path. Read with include!() by src/preload.rs's unit test
// (`rmcp run`, `rmcp check`) and by tests/cli_entrypoint.rs (the container entrypoint's
// own merge in sh), so that both follow the same rule. The entrypoint's test runs a shell
// with these values, so no entry names a real library (nothing exists under /r).
const MERGES: &[(Option<&str>, &str)] = &[
    (None, "S"),
    (Some(""), "S"),
    (Some(" : "), "S"),
    (Some("/a.so"), "S:/a.so"),
    (Some("/a.so:/b.so"), "S:/a.so:/b.so"),
    (Some("/a.so /b.so"), "S:/a.so:/b.so"),
    (Some("/a.so: /b.so "), "S:/a.so:/b.so"),
    // An entry with a glob character is kept as it is (the entrypoint must not expand it).
    (Some("/x/*.so"), "S:/x/*.so"),
    // Already there: unchanged, whatever the separators.
    (Some("/a.so S"), "/a.so S"),
    (Some("S"), "S"),
    // Another copy of the shim is replaced, not kept next to ours.
    (Some("/old/librmcp_shim.so:/a.so"), "S:/a.so"),
    (Some("/a.so:S:/old/librmcp_shim.so"), "S:/a.so"),
    // Sanitizer runtimes stay first, in their order; the shim right after them.
    (Some("/r/libasan.so.8"), "/r/libasan.so.8:S"),
    (Some("/r/gcc/12/libasan.so /a.so"), "/r/gcc/12/libasan.so:S:/a.so"),
    (Some("/r/libasan.so.8:/r/libubsan.so.1"), "/r/libasan.so.8:/r/libubsan.so.1:S"),
    (Some("/r/libtsan.so.2"), "/r/libtsan.so.2:S"),
    (Some("/r/liblsan.so.0"), "/r/liblsan.so.0:S"),
    (Some("/r/libhwasan.so.0"), "/r/libhwasan.so.0:S"),
    (Some("/r/libubsan.so.1:/a.so"), "/r/libubsan.so.1:S:/a.so"),
    (Some("/r/libclang_rt.asan-x86_64.so"), "/r/libclang_rt.asan-x86_64.so:S"),
    (Some("/r/libclang_rt.asan.so"), "/r/libclang_rt.asan.so:S"),
    (Some("/r/libclang_rt.hwasan-aarch64.so"), "/r/libclang_rt.hwasan-aarch64.so:S"),
    (Some("/r/libclang_rt.hwasan_aliases-x86_64.so"), "/r/libclang_rt.hwasan_aliases-x86_64.so:S"),
    (Some("/r/libclang_rt.tsan-x86_64.so"), "/r/libclang_rt.tsan-x86_64.so:S"),
    (Some("/r/libclang_rt.ubsan_standalone-x86_64.so"), "/r/libclang_rt.ubsan_standalone-x86_64.so:S"),
    (Some("/r/libclang_rt.ubsan_minimal-i386.so"), "/r/libclang_rt.ubsan_minimal-i386.so:S"),
    (Some("/r/libclang_rt.asan-aarch64-android.so"), "/r/libclang_rt.asan-aarch64-android.so:S"),
    // A sanitizer runtime behind other entries is moved to the front.
    (Some("/a.so:/r/libasan.so.8"), "/r/libasan.so.8:S:/a.so"),
    (Some("/a.so /r/libtsan.so.2 /b.so"), "/r/libtsan.so.2:S:/a.so:/b.so"),
    // The shim already there: the runtimes move in front, the rest keeps its order.
    (Some("/r/libasan.so.8:S:/a.so"), "/r/libasan.so.8:S:/a.so"),
    (Some("/r/libasan.so.8 /a.so S"), "/r/libasan.so.8 /a.so S"),
    (Some("S:/r/libasan.so.8"), "/r/libasan.so.8:S"),
    (Some("/a.so S /r/libasan.so.8"), "/r/libasan.so.8:/a.so:S"),
    (Some("/r/libasan.so.8:S:/old/librmcp_shim.so"), "/r/libasan.so.8:S"),
    (Some("/old/librmcp_shim.so:/r/libasan.so.8"), "/r/libasan.so.8:S"),
    // Names that only look alike are ordinary entries.
    (Some("/a/libasan_helper.so"), "S:/a/libasan_helper.so"),
    (Some("/a/libasan.sox"), "S:/a/libasan.sox"),
    (Some("/a/libasan.so.8/x.so"), "S:/a/libasan.so.8/x.so"),
    (Some("/a/mylibasan.so"), "S:/a/mylibasan.so"),
    (Some("/a/libclang_rt.asan_static-x86_64.so"), "S:/a/libclang_rt.asan_static-x86_64.so"),
    (Some("/a/libclang_rt.asan-.so"), "S:/a/libclang_rt.asan-.so"),
    (Some("/a/libclang_rt.asan-x86_64.a"), "S:/a/libclang_rt.asan-x86_64.a"),
    (Some("/a/libclang_rt.memprof-x86_64.so"), "S:/a/libclang_rt.memprof-x86_64.so"),
    (Some("/a/libubsan.so.1.bak/"), "S:/a/libubsan.so.1.bak/"),
];
