//! The shim's state, built on the first hooked call and never before: the library's
//! constructor does nothing, so a process that never calls HIP pays nothing.
//!
//! Three stages, each built once: the configuration (environment, logging), the runtime
//! (locating the mapped libamdhip64; no HIP call), and the device picture (the KFD
//! topology, classified by `rmcp_core::classify`). A hook re-entered while a later stage is
//! being built only needs the earlier ones.
//!
//! The shim asks the runtime nothing before the application's first call reaches it, unless
//! the decision needs the answer: the HIP ordinals are mapped to KFD nodes (by PCI address)
//! only on a mixed machine, and the runtime's version only for a hipHostAlloc call. Some
//! runtimes answer a process's first call differently from later ones (5.7.1 without a GPU:
//! 101, then 100), so an early query could change what the application sees. The banner and
//! the stats report, which want both, ask after the first call has been forwarded
//! (`report::after_call`).

use rmcp_core::classify::{self, Classes, Device, DeviceClass};
use rmcp_core::config::{Config, Mode};
use rmcp_core::policy::{self, Rules};
use rmcp_core::topology::Topology;
use rmcp_sys::locate::{self, Runtime};

use crate::devices;
use crate::once::ForkOnce;

pub(crate) struct Shim {
    pub(crate) config: &'static Config,
    pub(crate) runtime: Option<&'static Runtime>,
    pub(crate) rules: Rules,
    pub(crate) host_affected: bool,
    pub(crate) device_class: DeviceClass,
    /// None while unknown (off mode, or no readable topology).
    topology: Option<Topology>,
    /// hipRuntimeGetVersion, asked once when first needed.
    version: ForkOnce<Option<i32>>,
    /// The HIP ordinals, listed once when first needed (at build on a mixed machine).
    devices: ForkOnce<Vec<Device>>,
}

static CONFIG: ForkOnce<Config> = ForkOnce::new();
static RUNTIME: ForkOnce<Option<Runtime>> = ForkOnce::new();
static SHIM: ForkOnce<Shim> = ForkOnce::new();

/// True when the process runs in secure-execution mode (setuid, setgid, capabilities).
fn secure_execution() -> bool {
    // SAFETY: getauxval reads the auxiliary vector the kernel handed the process; it has
    // no preconditions and returns 0 for an absent entry.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// The configuration; sets up logging the first time.
pub(crate) fn config() -> &'static Config {
    CONFIG.get_or_init(|| {
        let cfg = Config::from_env(secure_execution());
        let log_warning = crate::log::init(&cfg);
        for w in cfg.warnings.iter().chain(log_warning.iter()) {
            tracing::warn!("{w}");
        }
        cfg
    })
}

/// Base address of this library, so the locator never takes it for the runtime.
fn own_base() -> usize {
    locate::object_of(own_base as *const () as usize).map_or(0, |(base, _)| base)
}

/// The runtime calls are forwarded to, found once.
pub(crate) fn runtime() -> Option<&'static Runtime> {
    RUNTIME
        .get_or_init(|| {
            let cfg = config();
            let req = locate::Request {
                library: cfg.hip_library.clone(),
                exclude_base: own_base(),
                mapped_only: false,
            };
            match locate::locate(&req) {
                Ok(rt) => {
                    if rt.mapped.len() > 1 {
                        tracing::warn!(
                            "{} copies of the HIP runtime are mapped in this process ({}); using the first, {}",
                            rt.mapped.len(),
                            rt.mapped.join(", "),
                            rt.path
                        );
                    }
                    Some(rt)
                }
                Err(e) => {
                    tracing::error!("{e}; HIP calls return hipErrorSharedObjectSymbolNotFound");
                    None
                }
            }
        })
        .as_ref()
}

/// The runtime if it has been found already, without looking.
pub(crate) fn runtime_if_found() -> Option<&'static Runtime> {
    RUNTIME.get().and_then(Option::as_ref)
}

/// The whole state, built on first use.
pub(crate) fn shim() -> &'static Shim {
    SHIM.get_or_init(build)
}

/// The state if built (for the exit report and proc-address substitution).
pub(crate) fn shim_if_built() -> Option<&'static Shim> {
    SHIM.get()
}

fn build() -> Shim {
    let config = config();
    let runtime = runtime();
    let mut shim = Shim {
        config,
        runtime,
        rules: Rules {
            mode: config.mode,
            finegrained: config.finegrained,
        },
        host_affected: false,
        device_class: DeviceClass::All(false),
        topology: None,
        version: ForkOnce::new(),
        devices: ForkOnce::new(),
    };
    if config.mode != Mode::Off {
        classify_devices(&mut shim);
    }
    crate::report::install_exit_hooks(config);
    shim
}

/// Reads the topology and decides which allocations are rewritten. Only a machine whose
/// GPUs are partly affected needs the HIP ordinals, and only then are they listed now.
fn classify_devices(shim: &mut Shim) {
    let cfg = shim.config;
    shim.topology = match Topology::read_gpus(&cfg.sysfs_root) {
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
    };
    match classify::classify(shim.topology.as_ref(), &cfg.targets, cfg.mode) {
        Classes::Uniform(affected) => {
            shim.host_affected = affected;
            shim.device_class = DeviceClass::All(affected);
        }
        Classes::Mixed => {
            let (host, device) = classify::by_ordinal(shim.devices());
            shim.host_affected = host;
            shim.device_class = device;
        }
    }
}

impl Shim {
    /// hipRuntimeGetVersion, asked once.
    pub(crate) fn version(&self) -> Option<i32> {
        *self.version.get_or_init(|| {
            self.runtime
                .and_then(|rt| devices::runtime_version(&rt.api))
        })
    }

    /// The version if it was asked already, without asking.
    pub(crate) fn version_if_known(&self) -> Option<i32> {
        self.version.get().copied().flatten()
    }

    /// Whether the runtime's hipHostAlloc allocates host memory.
    pub(crate) fn host_alloc_is_host(&self) -> bool {
        self.version().is_some_and(policy::host_alloc_is_host)
    }

    /// The HIP ordinals with their PCI address and KFD classification, listed once.
    pub(crate) fn devices(&self) -> &[Device] {
        self.devices.get_or_init(|| {
            let ordinals = self
                .runtime
                .map(|rt| devices::ordinals(&rt.api))
                .unwrap_or_default();
            classify::devices(
                self.topology.as_ref(),
                &ordinals,
                &self.config.targets,
                self.config.mode,
            )
        })
    }

    /// The devices if they were listed already, without listing them.
    pub(crate) fn devices_if_listed(&self) -> &[Device] {
        self.devices.get().map_or(&[][..], Vec::as_slice)
    }

    /// Is the calling thread's current device affected?
    pub(crate) fn current_device_affected(&self) -> bool {
        match &self.device_class {
            DeviceClass::All(v) => *v,
            DeviceClass::PerOrdinal(table) => self
                .runtime
                .and_then(|rt| devices::current(&rt.api))
                .and_then(|i| table.get(i))
                .copied()
                .unwrap_or(false),
        }
    }
}
