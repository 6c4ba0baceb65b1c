//! The shim's state, built on the first hooked call and never before: the library's
//! constructor does nothing, so a process that never calls HIP pays nothing.
//!
//! Three stages, each built once: the configuration (environment, logging), the runtime
//! (locating the mapped libamdhip64; no HIP call), and the device picture (the KFD
//! topology). A hook re-entered while a later stage is being built only needs the earlier
//! ones.
//!
//! The shim asks the runtime nothing before the application's first call reaches it, unless
//! the decision needs the answer: the HIP ordinals are mapped to KFD nodes (by PCI address)
//! only on a mixed machine, and the runtime's version only for a hipHostAlloc call. Some
//! runtimes answer a process's first call differently from later ones (5.7.1 without a GPU:
//! 101, then 100), so an early query could change what the application sees. The banner and
//! the stats report, which want both, ask after the first call has been forwarded.

use std::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::once::ForkOnce;
use rmcp_sys::locate::{self, Runtime};
use rmcp_sys::{HipApi, PciAddress, error};

use crate::config::{Config, Mode};
use crate::policy::Rules;
use crate::stats::{self, DeviceReport, Report, RuntimeReport};
use crate::topology::{self, Gfx, Topology};

/// The most HIP ordinals looked at.
pub const MAX_DEVICES: usize = 64;

/// First runtime whose hipHostAlloc allocates host memory like hipHostMalloc: ROCm 6.3.0
/// (ROCm/clr e988e5e4 "Un-deprecate hipHostAlloc()" and 1e4c60f2, on the 6.3 branch as
/// 1595b958 and d962d399). Up to 6.2.4 it passes its flags to ihipMalloc as internal
/// flags and allocates VRAM on the current device.
pub const HOST_ALLOC_IS_HOST_SINCE: (i32, i32) = (6, 3);

/// One HIP ordinal as the shim sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    pub ordinal: i32,
    pub pci: Option<PciAddress>,
    /// From the KFD node at that PCI address; Gfx(0) if none matched.
    pub gfx: Gfx,
    pub affected: bool,
}

/// Whether device allocations are rewritten, by current device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceClass {
    /// The same answer for every device: no per-call query.
    All(bool),
    /// Indexed by HIP ordinal; the current device is asked per call.
    PerOrdinal(Vec<bool>),
}

pub struct Shim {
    pub config: &'static Config,
    pub runtime: Option<&'static Runtime>,
    pub rules: Rules,
    pub host_affected: bool,
    pub device_class: DeviceClass,
    /// None while unknown (off mode, or not yet read).
    topology: Option<Topology>,
    /// hipRuntimeGetVersion, asked once when first needed.
    version: ForkOnce<Option<i32>>,
    /// The HIP ordinals, listed once when first needed (at build on a mixed machine).
    devices: ForkOnce<Vec<Device>>,
}

static CONFIG: ForkOnce<Config> = ForkOnce::new();
static RUNTIME: ForkOnce<Option<Runtime>> = ForkOnce::new();
static SHIM: ForkOnce<Shim> = ForkOnce::new();

/// The configuration; sets up logging the first time.
pub fn config() -> &'static Config {
    CONFIG.get_or_init(|| {
        let cfg = Config::from_env();
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
pub fn runtime() -> Option<&'static Runtime> {
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
pub fn runtime_if_found() -> Option<&'static Runtime> {
    RUNTIME.get().and_then(Option::as_ref)
}

/// The whole state, built on first use.
pub fn shim() -> &'static Shim {
    SHIM.get_or_init(build)
}

/// The state if built (for the exit report and proc-address substitution).
pub fn shim_if_built() -> Option<&'static Shim> {
    SHIM.get()
}

fn runtime_version(api: &HipApi) -> Option<i32> {
    let f = api.hipRuntimeGetVersion?;
    let mut v: c_int = 0;
    // SAFETY: hipRuntimeGetVersion(int*) writes one int through a valid pointer.
    (unsafe { f(&mut v) } == error::SUCCESS).then_some(v)
}

/// The HIP ordinals and their PCI addresses, as the runtime reports them.
fn enumerate(api: &HipApi) -> Vec<(i32, Option<PciAddress>)> {
    let (Some(count_fn), Some(bus_fn)) = (api.hipGetDeviceCount, api.hipDeviceGetPCIBusId) else {
        return Vec::new();
    };
    let mut n: c_int = 0;
    // SAFETY: hipGetDeviceCount(int*) writes one int through a valid pointer.
    if unsafe { count_fn(&mut n) } != error::SUCCESS {
        return Vec::new();
    }
    (0..n.clamp(0, MAX_DEVICES as c_int))
        .map(|ordinal| {
            let mut buf = [0 as c_char; 64];
            // SAFETY: the buffer is 64 bytes and its length is passed; the runtime writes a
            // NUL-terminated string of at most that length.
            let rc = unsafe { bus_fn(buf.as_mut_ptr(), buf.len() as c_int, ordinal) };
            let pci = (rc == error::SUCCESS)
                .then(|| {
                    // SAFETY: on success the runtime wrote a NUL-terminated string into buf;
                    // the last byte is forced to NUL in case it did not.
                    buf[63] = 0;
                    let s = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
                    PciAddress::parse(s.to_str().ok()?)
                })
                .flatten();
            (ordinal, pci)
        })
        .collect()
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
        classify(&mut shim);
    }
    install_exit_hooks(config);
    shim
}

/// Reads the topology and decides which allocations are rewritten. Only a machine whose
/// GPUs are partly affected needs the HIP ordinals, and only then are they listed now.
fn classify(shim: &mut Shim) {
    let cfg = shim.config;
    if cfg.mode == Mode::Force {
        shim.host_affected = true;
        shim.device_class = DeviceClass::All(true);
    }
    let topo = match Topology::read_gpus(&cfg.sysfs_root) {
        Ok(t) => {
            for p in &t.problems {
                tracing::debug!("KFD topology: {p}");
            }
            t
        }
        Err(e) => {
            tracing::info!(
                "no readable KFD topology at {}: {e}; {}",
                cfg.sysfs_root.display(),
                if cfg.mode == Mode::Force {
                    "RMCP_MODE=force treats every device as affected"
                } else {
                    "auto mode rewrites nothing"
                }
            );
            return;
        }
    };
    let affected = topo
        .gpus
        .iter()
        .filter(|g| topology::is_affected(g, cfg))
        .count();
    shim.topology = Some(topo);
    if cfg.mode == Mode::Force {
        return;
    }
    let gpus = shim.topology.as_ref().map_or(0, |t| t.gpus.len());
    if affected == 0 || affected == gpus {
        // Every GPU the process can see is alike: no ordinal needs mapping.
        shim.host_affected = affected > 0;
        shim.device_class = DeviceClass::All(affected > 0);
        return;
    }
    let classes: Vec<bool> = shim.devices().iter().map(|d| d.affected).collect();
    // No ordinal could be listed (no device): fall back to the topology.
    shim.host_affected = classes.is_empty() || classes.iter().any(|c| *c);
    shim.device_class = match classes.first() {
        None => DeviceClass::All(true),
        Some(first) if classes.iter().all(|c| c == first) => DeviceClass::All(*first),
        Some(_) => DeviceClass::PerOrdinal(classes),
    };
}

impl Shim {
    /// hipRuntimeGetVersion, asked once.
    pub fn version(&self) -> Option<i32> {
        *self
            .version
            .get_or_init(|| self.runtime.and_then(|rt| runtime_version(&rt.api)))
    }

    /// Whether the runtime's hipHostAlloc allocates host memory (see
    /// [`HOST_ALLOC_IS_HOST_SINCE`]).
    pub fn host_alloc_is_host(&self) -> bool {
        self.version().is_some_and(|v| {
            let (major, minor, _) = rmcp_sys::split_hip_version(v);
            (major, minor) >= HOST_ALLOC_IS_HOST_SINCE
        })
    }

    /// The HIP ordinals with their PCI address and KFD classification, listed once.
    pub fn devices(&self) -> &[Device] {
        self.devices.get_or_init(|| {
            let force = self.config.mode == Mode::Force;
            let ordinals = self
                .runtime
                .map(|rt| enumerate(&rt.api))
                .unwrap_or_default();
            ordinals
                .into_iter()
                .map(|(ordinal, pci)| {
                    let node = self
                        .topology
                        .as_ref()
                        .zip(pci)
                        .and_then(|(t, p)| t.gpu_at(p));
                    Device {
                        ordinal,
                        pci,
                        gfx: node.map_or(Gfx(0), |n| n.gfx),
                        affected: force
                            || node.is_some_and(|n| topology::is_affected(n, self.config)),
                    }
                })
                .collect()
        })
    }

    /// The banner or the stats report will want the version and the devices.
    fn wants_details(&self) -> bool {
        self.config.stats
            || self.config.stats_file.is_some()
            || tracing::enabled!(tracing::Level::INFO)
    }

    /// Is the calling thread's current device affected?
    pub fn current_device_affected(&self) -> bool {
        match &self.device_class {
            DeviceClass::All(v) => *v,
            DeviceClass::PerOrdinal(table) => {
                let Some(get) = self.runtime.and_then(|rt| rt.api.hipGetDevice) else {
                    return false;
                };
                let mut d: c_int = -1;
                // SAFETY: hipGetDevice(int*) writes one int through a valid pointer.
                if unsafe { get(&mut d) } != error::SUCCESS {
                    return false;
                }
                usize::try_from(d)
                    .ok()
                    .and_then(|i| table.get(i))
                    .copied()
                    .unwrap_or(false)
            }
        }
    }

    pub fn report(&self) -> Report {
        Report::new(
            self.config.mode.as_str(),
            RuntimeReport {
                path: self.runtime.map(|rt| rt.path.clone()),
                version: self.version.get().copied().flatten(),
            },
            self.devices
                .get()
                .map_or(&[][..], Vec::as_slice)
                .iter()
                .map(|d| DeviceReport {
                    ordinal: d.ordinal,
                    gfx: d.gfx.to_string(),
                    pci: d.pci.map_or_else(|| "unknown".into(), |p| p.to_string()),
                    affected: d.affected,
                })
                .collect(),
        )
    }
}

static DETAILS: AtomicBool = AtomicBool::new(false);

/// Called after each forwarded call: the first time, if the banner or the stats report
/// want them, asks the runtime for its version and devices and logs the banner.
#[inline(always)]
pub fn after_call(shim: &Shim) {
    if !DETAILS.load(Ordering::Relaxed) {
        first_details(shim);
    }
}

#[cold]
fn first_details(shim: &Shim) {
    if DETAILS.swap(true, Ordering::Relaxed) || !shim.wants_details() {
        return;
    }
    shim.version();
    if shim.config.mode != Mode::Off {
        shim.devices();
    }
    banner(shim);
}

fn banner(shim: &Shim) {
    let rt = shim.runtime.map_or_else(
        || "none".to_string(),
        |rt| format!("{} ({})", rt.path, rt.source.as_str()),
    );
    let version = shim
        .version()
        .map_or_else(|| "unknown".to_string(), |v| v.to_string());
    tracing::info!(
        "mode {}, runtime {rt}, hipRuntimeGetVersion {version}, host allocations {}",
        shim.config.mode.as_str(),
        if shim.host_affected {
            "rewritten"
        } else {
            "unchanged"
        },
    );
    for d in shim.devices.get().map_or(&[][..], Vec::as_slice) {
        tracing::info!(
            "device {}: {} at {}, {}",
            d.ordinal,
            d.gfx,
            d.pci.map_or_else(|| "unknown".into(), |p| p.to_string()),
            if d.affected {
                "affected"
            } else {
                "not affected"
            }
        );
    }
}

static EXIT_HOOKS: AtomicBool = AtomicBool::new(false);

fn install_exit_hooks(cfg: &Config) {
    if EXIT_HOOKS.swap(true, Ordering::SeqCst) {
        return;
    }
    // SAFETY: both callbacks are `extern "C"` functions of this library, which is never
    // unloaded (it is preloaded, or at worst dlopened and never closed by us).
    unsafe {
        libc::pthread_atfork(None, None, Some(after_fork_in_child));
        if cfg.stats || cfg.stats_file.is_some() {
            libc::atexit(at_exit);
        }
    }
}

extern "C" fn after_fork_in_child() {
    // The child counts its own calls.
    stats::reset_after_fork();
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(write_report);
}

/// `%p` in RMCP_STATS_FILE becomes the process id, so the processes of one job do not
/// overwrite each other's report.
pub fn stats_path(template: &std::path::Path, pid: u32) -> std::path::PathBuf {
    let s = template.to_string_lossy();
    if s.contains("%p") {
        s.replace("%p", &pid.to_string()).into()
    } else {
        template.to_path_buf()
    }
}

fn write_report() {
    let Some(shim) = shim_if_built() else {
        return;
    };
    let report = shim.report();
    let stderr = crate::log::FdWriter(libc::STDERR_FILENO);
    if shim.config.stats {
        let _ = std::io::Write::write_all(&mut stderr.clone(), report.human().as_bytes());
    }
    if let Some(template) = &shim.config.stats_file {
        let path = stats_path(template, report.pid);
        let json = serde_json::to_string_pretty(&report).unwrap_or_default() + "\n";
        if let Err(e) = std::fs::write(&path, &json) {
            tracing::warn!(
                "RMCP_STATS_FILE {}: {e}; writing the report to stderr instead",
                path.display()
            );
            let _ = std::io::Write::write_all(&mut stderr.clone(), json.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_path_substitutes_pid() {
        use std::path::Path;
        assert_eq!(
            stats_path(Path::new("/t/s-%p.json"), 42),
            Path::new("/t/s-42.json")
        );
        assert_eq!(
            stats_path(Path::new("/t/s.json"), 42),
            Path::new("/t/s.json")
        );
    }
}
