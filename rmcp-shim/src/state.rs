//! The shim's shared state, built on the first hooked call and never before: the library's
//! constructor does nothing, so a process that never calls HIP pays nothing.
//!
//! Two stages, each built once and safe to wait for, because building them takes no lock
//! the loader holds and calls no HIP function: the configuration (environment, logging)
//! and the device picture ([`Global`]: the KFD topology, classified by
//! `rmcp_core::classify`). What needs the loader or the runtime (where a caller's calls go,
//! each runtime copy's version and devices) is `binding`'s and `copies`'s, built by the
//! thread that needs it and never waited for: a thread that holds the loader's lock (inside
//! dlopen, running a constructor that allocates) must never wait for one that wants it.
//!
//! The shim asks a runtime nothing before the application's first call reaches it, unless
//! the decision needs the answer: the HIP ordinals are mapped to KFD nodes (by PCI address)
//! only on a mixed machine, and a runtime's version only for a hipHostAlloc call. Some
//! runtimes answer a process's first call differently from later ones (5.7.1 without a GPU:
//! 101, then 100), so an early query could change what the application sees. The banner and
//! the stats report, which want both, have them asked after the first call has been
//! forwarded, on a thread of the shim's own (`report::after_call`): a query on the
//! caller's thread would reset the runtime's per-thread last error (issue 30).

use rmcp_core::classify::{self, Classes};
use rmcp_core::config::{Config, Mode};
use rmcp_core::policy::Rules;
use rmcp_core::topology::Topology;
use rmcp_sys::locate::{self, Runtime};

use crate::once::ForkOnce;

/// What every call's decision shares.
pub(crate) struct Global {
    pub(crate) config: &'static Config,
    pub(crate) rules: Rules,
    /// What the topology says; `Mixed` sends the question to each copy's devices.
    pub(crate) classes: Classes,
    /// None in off mode, or with no readable topology.
    pub(crate) topology: Option<Topology>,
}

static CONFIG: ForkOnce<Config> = ForkOnce::new();
static GLOBAL: ForkOnce<Global> = ForkOnce::new();
static LOCATED: ForkOnce<Option<Runtime>> = ForkOnce::new();

/// True when the process runs in secure-execution mode (setuid, setgid, capabilities).
fn secure_execution() -> bool {
    // SAFETY: getauxval reads the auxiliary vector the kernel handed the process; it has
    // no preconditions and returns 0 for an absent entry.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// The configuration; sets up logging the first time.
pub(crate) fn config() -> &'static Config {
    CONFIG.get_or_init(|| {
        // The shim's panics are caught where they happen and the call forwarded; the
        // library's own copy of std must not print them into the program's stderr. (The
        // hook is this library's std's, not the program's.)
        std::panic::set_hook(Box::new(|_| {}));
        let cfg = Config::from_env(secure_execution());
        let log_warning = crate::log::init(&cfg);
        for w in cfg.warnings.iter().chain(log_warning.iter()) {
            tracing::warn!("{w}");
        }
        cfg
    })
}

/// The shared state, built on first use; `first` runs once, on the state just built, before
/// any thread sees it (`report::global` passes what a process's first call starts: the exit
/// hooks, the override warning).
#[inline(always)]
pub(crate) fn global_with(first: impl FnOnce(&Global)) -> &'static Global {
    GLOBAL.get_or_init(|| {
        let g = build();
        first(&g);
        // Building made the shim's own loader calls: none leaves a dlerror() message.
        crate::dlerror::clear();
        g
    })
}

/// The shared state if built (for the exit report).
pub(crate) fn global_if_built() -> Option<&'static Global> {
    GLOBAL.get()
}

fn build() -> Global {
    let config = config();
    let topology = if config.mode == Mode::Off {
        None
    } else {
        read_topology(config)
    };
    let classes = if config.mode == Mode::Off {
        Classes::Uniform(false)
    } else {
        classify::classify(topology.as_ref(), &config.targets, config.mode)
    };
    Global {
        config,
        rules: Rules {
            mode: config.mode,
            finegrained: config.finegrained,
            host_coherent: runtime_host_coherent(),
        },
        classes,
        topology,
    }
}

/// The runtime's HIP_HOST_COHERENT, read from the environment the runtime reads it from
/// (`Flag::init` walks `environ` when the runtime initialises; the first definition wins, as
/// with getenv), parsed as the runtime parses it.
fn runtime_host_coherent() -> bool {
    use std::os::unix::ffi::OsStrExt;
    let value = std::env::var_os("HIP_HOST_COHERENT");
    rmcp_core::policy::hip_host_coherent(value.as_deref().map(OsStrExt::as_bytes))
}

fn read_topology(cfg: &Config) -> Option<Topology> {
    match Topology::read_gpus(&cfg.sysfs_root) {
        Ok(t) => {
            for p in &t.problems {
                tracing::debug!("KFD topology: {p}");
            }
            Some(t)
        }
        Err(e) => {
            tracing::info!(
                "no readable KFD topology at {}: {e}; {}",
                cfg.sysfs_root.display(),
                match classify::classify(None, &cfg.targets, cfg.mode) {
                    Classes::Uniform(true) => "every device is treated as affected",
                    _ => "nothing is rewritten",
                }
            );
            None
        }
    }
}

/// Base address of this library, so the locator never takes it for the runtime.
fn own_base() -> usize {
    locate::object_of(own_base as *const () as usize).map_or(0, |(base, _)| base)
}

/// The runtime for callers with none in their scopes: the first mapped copy, else
/// RMCP_HIP_LIBRARY, else the sonames, loaded. Found once; None while another thread is
/// looking (loading takes the loader's lock, which this thread may hold).
///
/// The locator's lookups (`dlsym` on the runtime's handle) reach the front's `dlsym`; the
/// thread is marked inside the shim while it looks, so that they are answered with the
/// runtime's own functions, never with the shim's entries (issue 30: from the fork step,
/// outside any hooked call, the answer was a per-copy entry, which the locator rejected as
/// rmcp's own library).
pub(crate) fn located_runtime() -> Option<&'static Runtime> {
    LOCATED
        .get_or_init_unless_busy(|| {
            crate::thread::with(|t| {
                let _inside = t.enter();
                locate_runtime()
            })
        })
        .and_then(Option::as_ref)
}

fn locate_runtime() -> Option<Runtime> {
    let cfg = config();
    let req = locate::Request {
        library: cfg.hip_library.clone(),
        exclude_base: own_base(),
        mapped_only: false,
    };
    match locate::locate(&req) {
        Ok(rt) => Some(rt),
        Err(e) => {
            tracing::error!("{e}; HIP calls return hipErrorSharedObjectSymbolNotFound");
            None
        }
    }
}
