//! librmcp_shim_body.so: the shim. Makes coherent (fine-grained) HIP allocations
//! non-coherent on the GPUs where that memory is served badly (RDNA1/RDNA2 by default),
//! transparently, for any program that loads the HIP runtime.
//!
//! Two objects (docs/design.md): a process preloads librmcp_shim.so, the small C object
//! in `front/` (built by build.rs), which exports the hooked names and `dlsym` and maps
//! this library, from its own directory, on the process's first hooked call. A process
//! that never calls HIP pays for the front alone. This library exports one function,
//! `rmcp_shim_attach`, through which the front hands over what belongs to the preloaded
//! object and takes this library's entry points. What it decides comes from `rmcp-core`
//! (pure: configuration, classification, policy, the hook registry); what it is is here,
//! bottom up: each module uses only modules listed before it (the `layering` test below
//! checks it), so the body reads from the top of this list down.
//! - `entries`: the addresses of this library's entry points (`exports` defines them);
//! - `front`: what the front provides (its exports, RTLD_NEXT from its place, the
//!   generation of loaded objects, the per-thread block, descriptor 2 at start);
//! - `dlerror`: the thread's `dlerror()` state around the shim's own loader calls;
//! - `cancel`: cancellation kept off the shim's own work (pthread_cancel);
//! - `alloc`: the shim's heap, with an emergency arena when malloc fails;
//! - `once`: a fork-safe once-cell; `log`: the shim's own log writer and its rules for
//!   writing into the program's files;
//! - `thread`: per-thread state; `stats`: the per-hook counters;
//! - `state`: the shared lazy stages (configuration, device picture);
//! - `devices`: a runtime's answers about its devices, over FFI;
//! - `copies`: the runtime copies calls reach, with each one's version and devices;
//! - `binding`: where each caller's calls go (the function it would have reached without
//!   the shim), and whether it is exempt (RMCP_EXEMPT);
//! - `seqlock`: how a ring entry is written without a lock and read whole at fault time;
//! - `launches`: the launch ring and the kernels' names; `graphs`: the kernels put into HIP
//!   graphs (captured, or given as kernel nodes); `allocations`: the record of the
//!   allocations hooked calls made (all for the GPU fault report);
//! - `report`: the banner, the warnings of the first call and the exit report, with the
//!   exit and fork hooks that make them;
//! - `own_memory`: reading the process's own memory without faulting;
//! - `kernel_objects`: the kernels each executable the runtime froze holds, by kernel object;
//!   `dispatches`: the HSA queues the runtime created and the packet each is on (what names
//!   the dispatch running at a fault, a reset or a stall);
//! - `fault`: the GPU fault handler and the block it writes; `queues`: the wrapped error
//!   callbacks of HSA queues, which hand a queue error to `fault`; `watchdog`: the stall
//!   watchdog (RMCP_HANG_AFTER) over the synchronizing calls;
//! - `handout`: what a lookup hands out in place of a runtime's function (the front's
//!   export or a copy's own entry), and where a call no calling object places goes;
//! - `fatbin`: the fat binaries registered at start-up under an override that makes a
//!   gfx1010-gfx1013 card run gfx103x code (a private copy of the entry the runtime loads,
//!   fixed in place);
//! - `observed`: the entries of the observed functions (launches, graph calls,
//!   `__hipRegisterFunction`, `__hipRegisterFatBinary`, `hsa_queue_create`,
//!   `hsa_executable_freeze`), ordinary and per-copy, which record one fact and go on
//!   untouched (but a queue's callback and, under such an override, a fat binary's
//!   wrapper);
//! - `intercept`: what every hook does (decide, forward, fall back, count);
//! - `module_load`: what the module-load hooks do with a code object (the load-time fix of
//!   broken buffer descriptors);
//! - `exports`: the entry trampolines, one per hooked function and eight per-copy ones per
//!   function, and the stats entry;
//! - `dlsym`: the lookup of hooked names, for callers that look HIP up on a handle;
//! - `attach`: `rmcp_shim_attach`, which hands the front this library's entries.
//!
//! Nothing here runs at load: no constructor, no file opened, no HIP call. All work
//! happens on the first hooked call, which is also when the front maps this library.
//!
//! The crate is also built as an rlib, only because cargo builds a library's cdylib for
//! integration tests and dependents when it has an rlib as well; the rlib exposes nothing.

mod entries;
mod front;
mod dlerror;
mod cancel;
mod alloc;
mod once;
mod log;
mod thread;
mod stats;
mod state;
mod devices;
mod copies;
mod binding;
mod seqlock;
mod own_memory;
mod launches;
mod graphs;
mod allocations;
mod report;
mod gfx101x;
mod kernel_objects;
mod dispatches;
mod fault;
mod queues;
mod watchdog;
mod handout;
mod fatbin;
mod observed;
mod intercept;
mod module_load;
mod exports;
mod dlsym;
mod attach;

/// The body's modules are layered: each uses only modules declared before it in this file
/// (so there is no import circle, and the list reads bottom up). Checked from the sources:
/// every `crate::NAME` a module's code names (comments aside, tests included) must be a
/// module declared above it. The compiler does not check this; this test does, on every
/// `cargo test`, and fails naming the edge that breaks it.
#[cfg(test)]
mod layering {
    use std::collections::BTreeSet;

    /// The modules as this file declares them, in order.
    fn declared(lib: &str) -> Vec<String> {
        lib.lines()
            .filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';'))
            .map(str::to_string)
            .collect()
    }

    /// The code of a source file without its comments (`//` to the end of the line, outside
    /// string literals), and what the `mod` items it declares inline say are its own.
    fn code(src: &str) -> String {
        let mut out = String::new();
        for line in src.lines() {
            let mut in_str = false;
            let mut prev = ' ';
            let mut cut = line.len();
            for (i, c) in line.char_indices() {
                if c == '"' && prev != '\\' {
                    in_str = !in_str;
                }
                if !in_str && c == '/' && prev == '/' {
                    cut = i - 1;
                    break;
                }
                prev = c;
            }
            out.push_str(&line[..cut]);
            out.push('\n');
        }
        out
    }

    /// The modules of this crate that `src` names: `crate::NAME` and `use crate::{A, B::..}`.
    pub(super) fn names(src: &str, modules: &[String]) -> BTreeSet<String> {
        let code = code(src);
        let mut found = BTreeSet::new();
        let mut rest = code.as_str();
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let ident: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if ident.is_empty() && after.starts_with('{') {
                let group = &after[1..after.find('}').unwrap_or(after.len())];
                for part in group.split(',') {
                    let head: String = part
                        .trim()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    found.insert(head);
                }
            } else {
                found.insert(ident);
            }
            rest = after;
        }
        found.retain(|m| modules.contains(m));
        found
    }

    #[test]
    fn each_module_uses_only_modules_declared_before_it() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let lib = std::fs::read_to_string(dir.join("lib.rs")).unwrap();
        let modules = declared(&lib);
        assert!(modules.len() >= 18, "{modules:?}");
        let on_disk: BTreeSet<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| {
                let name = e.ok()?.file_name().into_string().ok()?;
                name.strip_suffix(".rs").map(str::to_string)
            })
            .filter(|m| m != "lib")
            .collect();
        assert_eq!(
            on_disk,
            modules.iter().cloned().collect::<BTreeSet<_>>(),
            "every file of src/ is a module declared in lib.rs"
        );
        let mut wrong = Vec::new();
        for (i, m) in modules.iter().enumerate() {
            let src = std::fs::read_to_string(dir.join(format!("{m}.rs"))).unwrap();
            for used in names(&src, &modules) {
                let j = modules.iter().position(|x| *x == used).unwrap();
                if j >= i && used != *m {
                    wrong.push(format!("{m} uses {used}, declared after it"));
                }
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn the_check_sees_every_form_of_use() {
        let modules: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
        let src = "use crate::{a::X, b};\nfn f() { crate::c::g(); }\n// crate::d::h\n";
        let got: Vec<String> = names(src, &modules).into_iter().collect();
        assert_eq!(got, ["a", "b", "c"]);
    }
}
