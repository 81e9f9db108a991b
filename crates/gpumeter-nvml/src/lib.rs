//! # gpumeter-nvml
//!
//! Live device inventory, GPU energy counters and GPU compute processes from NVIDIA's
//! management library (NVML, `libnvidia-ml.so.1`, loaded at run time by [`nvml_wrapper`];
//! nothing is linked), behind the [`Telemetry`] trait:
//!
//! * [`Nvml`]: the live implementation. A missing library or driver, no permission, or a GPU
//!   without the counter is a typed [`TelemetryError`] that names the NVML call and the GPU,
//!   never a panic.
//! * [`Recorded`]: replays given GPUs, energy samples and process listings (tests, replays of
//!   recordings).
//!
//! ```
//! use gpumeter_nvml::{Nvml, Telemetry, TelemetryError};
//!
//! match Nvml::init() {
//!     Ok(nvml) => {
//!         for gpu in nvml.gpus()? {
//!             match nvml.energy(gpu.index) {
//!                 Ok(r) => println!("GPU {}: {} mJ at {} ns", gpu.index, r.energy_mj, r.timestamp_ns),
//!                 Err(e) => println!("{e}"),
//!             }
//!         }
//!     }
//!     // A machine without an NVIDIA driver (this documentation's build machine).
//!     Err(e @ TelemetryError::Unavailable { .. }) => println!("{e}"),
//!     Err(e) => return Err(e),
//! }
//! # Ok::<(), TelemetryError>(())
//! ```
//!
//! # Units
//!
//! Energy is integer millijoules (mJ) of NVML's cumulative counter: the energy the GPU used
//! since the NVIDIA kernel driver was last loaded (`nvmlDeviceGetTotalEnergyConsumption`). It
//! only grows while the driver stays loaded; a reload starts it again from 0. Times are
//! integer ns since the Unix epoch (the host's wall clock).
//!
//! # Sources
//!
//! NVML API Reference Guide (docs.nvidia.com/deploy/nvml-api): "Initialization and Cleanup"
//! (`nvmlInit_v2`), "Device Queries" (`nvmlDeviceGetCount_v2`, `nvmlDeviceGetHandleByIndex_v2`,
//! `nvmlDeviceGetName`, `nvmlDeviceGetUUID`, `nvmlDeviceGetTotalEnergyConsumption`: "Volta or
//! newer fully supported devices", mJ "since the driver was last reloaded";
//! `nvmlDeviceGetComputeRunningProcesses`: processes "with a compute context", `usedGpuMemory`
//! in bytes, aggregate information on a MIG-enabled GPU only with "appropriate privileges"),
//! "Multi Instance GPU Management" (`nvmlDeviceGetMigMode`), and "Error reporting"
//! (`nvmlReturn_t`). Process ids and memory: "Device Structs" (`nvmlProcessInfo_t`).
//!
//! Where this crate sits in the flow from sources to the bank, what it owns and what it may
//! depend on: `docs/ARCHITECTURE.md` in the repository.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod recorded;

#[cfg(feature = "live")]
use std::ffi::OsStr;
#[cfg(feature = "live")]
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{SystemTime, UNIX_EPOCH};

#[cfg(feature = "live")]
use nvml_wrapper::error::NvmlError as WrapperError;

pub use self::recorded::Recorded;

/// One GPU as NVML lists it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Gpu {
    /// NVML index, 0-based, in PCI bus order. Not necessarily the CUDA ordinal: CUDA orders
    /// devices fastest first unless `CUDA_DEVICE_ORDER=PCI_BUS_ID`, honours
    /// `CUDA_VISIBLE_DEVICES`, and enumerates MIG instances instead of a GPU in MIG mode.
    pub index: u32,
    /// Marketing name (`nvmlDeviceGetName`), e.g. `NVIDIA H100 80GB HBM3`; `None` when NVML
    /// did not give one.
    pub name: Option<String>,
    /// UUID (`nvmlDeviceGetUUID`), `GPU-…`, the CUDA driver's spelling; `None` when NVML did
    /// not give one.
    pub uuid: Option<String>,
    /// Whether MIG mode is currently enabled (`nvmlDeviceGetMigMode`, current mode); `false`
    /// when the GPU has no MIG support or NVML did not say.
    pub mig: bool,
}

/// One reading of a GPU's cumulative energy counter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct EnergyReading {
    /// NVML index of the GPU ([`Gpu::index`]).
    pub index: u32,
    /// When it was read, ns since the Unix epoch (the host's wall clock; for [`Nvml`], the
    /// midpoint of the clock read just before and just after the NVML call).
    pub timestamp_ns: u64,
    /// The counter, mJ since the NVIDIA driver was last loaded
    /// (`nvmlDeviceGetTotalEnergyConsumption`).
    pub energy_mj: u64,
}

/// Live inventory and energy of the host's GPUs.
///
/// Implementations are shared between threads (a sampler thread reads energy while another
/// lists GPUs), so they are `Send + Sync`. Calls may block as long as the driver does: a
/// caller that must not hang runs them on a thread of its own with a timeout.
pub trait Telemetry: Send + Sync {
    /// The GPUs, by NVML index. A GPU whose handle cannot be had (no permission to it, lost)
    /// is left out; a name, UUID or MIG mode that cannot be read is `None` / `false`.
    ///
    /// # Errors
    /// [`TelemetryError::Unavailable`] when NVML cannot be used; another variant when the GPU
    /// count cannot be read (`nvmlDeviceGetCount_v2`).
    #[doc(alias = "nvmlDeviceGetCount_v2")]
    fn gpus(&self) -> Result<Vec<Gpu>, TelemetryError>;

    /// Reads GPU `index`'s cumulative energy counter (mJ since the driver was loaded; Volta and
    /// newer) with the time it was read (ns since the Unix epoch).
    ///
    /// # Errors
    /// [`TelemetryError::NoDevice`] for an index NVML does not know;
    /// [`TelemetryError::NotSupported`] for a GPU (or driver) without the counter (before
    /// Volta); [`TelemetryError::NoPermission`]; [`TelemetryError::Failed`] otherwise (e.g. the
    /// GPU fell off the bus); [`TelemetryError::Exhausted`] from [`Recorded`] when its samples
    /// are used up.
    #[doc(alias = "nvmlDeviceGetTotalEnergyConsumption")]
    fn energy(&self, index: u32) -> Result<EnergyReading, TelemetryError>;

    /// The processes with a compute context on GPU `index` now (a CUDA program with a
    /// context), by host process id: NVML's `nvmlDeviceGetComputeRunningProcesses` ("Device
    /// Queries" in the NVML API Reference Guide). Graphics-only processes are not listed; on a
    /// GPU in MIG mode the parent GPU's handle lists every instance's processes only to a
    /// privileged caller (else [`TelemetryError::NoPermission`]); under MPS the MPS server is
    /// listed, not its clients. The order is NVML's.
    ///
    /// The default implementation lists nothing and returns
    /// [`TelemetryError::NotSupported`], so implementations written before this method (which
    /// came after [`Telemetry::gpus`] and [`Telemetry::energy`]) keep compiling; [`Nvml`] and
    /// [`Recorded`] implement it.
    ///
    /// # Errors
    /// [`TelemetryError::NoDevice`] for an index NVML does not know;
    /// [`TelemetryError::NotSupported`] for a driver library without the `_v3` entry point (an
    /// old driver) or an implementation that does not list processes; [`TelemetryError::NoPermission`];
    /// [`TelemetryError::Failed`] otherwise (e.g. the GPU fell off the bus).
    #[doc(alias = "nvmlDeviceGetComputeRunningProcesses")]
    #[doc(alias = "nvmlDeviceGetComputeRunningProcesses_v3")]
    fn processes(&self, index: u32) -> Result<Vec<GpuProcess>, TelemetryError> {
        Err(TelemetryError::NotSupported {
            call: CALL_PROCESSES,
            device: Some(index),
            detail: "this telemetry does not list GPU processes".to_string(),
        })
    }
}

/// One process with a compute context on a GPU, as NVML lists it
/// (`nvmlDeviceGetComputeRunningProcesses`, `nvmlProcessInfo_t`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct GpuProcess {
    /// The process id in the host's (the initial) pid namespace, as the NVIDIA driver knows
    /// it: not the pid a process in a container sees for itself.
    pub pid: u32,
    /// GPU memory the process uses on this GPU, bytes (`usedGpuMemory`); `None` when NVML
    /// does not say (`NVML_VALUE_NOT_AVAILABLE`: Windows under WDDM, or a caller without
    /// the privilege to see it).
    pub used_memory_bytes: Option<u64>,
}

/// Why NVML gave no answer. Every message names NVML and the call; those about one GPU name
/// its NVML index.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// NVML cannot be used at all: `libnvidia-ml.so.1` is not installed, the NVIDIA driver is
    /// not loaded (a machine without a GPU), or the library lacks NVML's entry points.
    #[error("NVML is not available ({call}): {detail}")]
    Unavailable {
        /// The NVML call that failed (`nvmlInit_v2`).
        call: &'static str,
        /// NVML's (or the loader's) message.
        detail: String,
    },
    /// The caller may not make this call (`NVML_ERROR_NO_PERMISSION`), e.g. a container
    /// without access to the GPU.
    #[error("NVML {call}{}: no permission: {detail}", gpu(.device))]
    NoPermission {
        /// The NVML call.
        call: &'static str,
        /// NVML index of the GPU, when the call was about one.
        device: Option<u32>,
        /// NVML's message.
        detail: String,
    },
    /// The GPU or driver does not support the call (`NVML_ERROR_NOT_SUPPORTED`, or a driver
    /// library without the function; the energy counter needs Volta or newer), or the
    /// [`Telemetry`] implementation does not make it.
    #[error("NVML {call}{}: not supported by this GPU or driver: {detail}", gpu(.device))]
    NotSupported {
        /// The NVML call.
        call: &'static str,
        /// NVML index of the GPU, when the call was about one.
        device: Option<u32>,
        /// NVML's message.
        detail: String,
    },
    /// NVML knows no GPU with this index.
    #[error("NVML {call}: no GPU with index {device}")]
    NoDevice {
        /// The NVML call.
        call: &'static str,
        /// The NVML index asked for.
        device: u32,
    },
    /// Any other failure (the GPU is lost, the driver answered unexpectedly, a panic in the
    /// wrapper was caught).
    #[error("NVML {call}{}: {detail}", gpu(.device))]
    Failed {
        /// The NVML call.
        call: &'static str,
        /// NVML index of the GPU, when the call was about one.
        device: Option<u32>,
        /// NVML's message.
        detail: String,
    },
    /// [`Recorded`] has no more energy samples for this GPU.
    #[error("recorded NVML telemetry has no more energy samples for GPU {device}")]
    Exhausted {
        /// NVML index of the GPU.
        device: u32,
    },
}

/// ` on GPU N`, or nothing.
fn gpu(device: &Option<u32>) -> String {
    device.map_or_else(String::new, |d| format!(" on GPU {d}"))
}

impl TelemetryError {
    /// The NVML index of the GPU this error is about, if any.
    pub fn device(&self) -> Option<u32> {
        match self {
            TelemetryError::Unavailable { .. } => None,
            TelemetryError::NoPermission { device, .. }
            | TelemetryError::NotSupported { device, .. }
            | TelemetryError::Failed { device, .. } => *device,
            TelemetryError::NoDevice { device, .. } | TelemetryError::Exhausted { device } => {
                Some(*device)
            }
        }
    }

    #[cfg(feature = "live")]
    /// The typed error for nvml-wrapper's error `e` from `call` (about GPU `device` when
    /// `Some`). The one place where NVML's return codes become ours.
    fn from_wrapper(call: &'static str, device: Option<u32>, e: WrapperError) -> TelemetryError {
        let detail = e.to_string();
        match e {
            WrapperError::LibloadingError(_)
            | WrapperError::LibraryNotFound
            | WrapperError::DriverNotLoaded
            | WrapperError::LibRmVersionMismatch
            | WrapperError::Uninitialized => TelemetryError::Unavailable { call, detail },
            WrapperError::FailedToLoadSymbol(_) | WrapperError::FunctionNotFound
                if device.is_none() && call == CALL_INIT =>
            {
                TelemetryError::Unavailable { call, detail }
            }
            WrapperError::FailedToLoadSymbol(_)
            | WrapperError::FunctionNotFound
            | WrapperError::NotSupported => TelemetryError::NotSupported {
                call,
                device,
                detail,
            },
            WrapperError::NoPermission => TelemetryError::NoPermission {
                call,
                device,
                detail,
            },
            WrapperError::InvalidArg | WrapperError::NotFound if call == CALL_HANDLE => {
                match device {
                    Some(device) => TelemetryError::NoDevice { call, device },
                    None => TelemetryError::Failed {
                        call,
                        device,
                        detail,
                    },
                }
            }
            _ => TelemetryError::Failed {
                call,
                device,
                detail,
            },
        }
    }
}

#[cfg(feature = "live")]
const CALL_INIT: &str = "nvmlInit_v2";
#[cfg(feature = "live")]
const CALL_COUNT: &str = "nvmlDeviceGetCount_v2";
#[cfg(feature = "live")]
const CALL_HANDLE: &str = "nvmlDeviceGetHandleByIndex_v2";
#[cfg(feature = "live")]
const CALL_ENERGY: &str = "nvmlDeviceGetTotalEnergyConsumption";
/// The NVML call behind [`Telemetry::processes`] (nvml-wrapper 0.13 calls the `_v3` entry
/// point).
const CALL_PROCESSES: &str = "nvmlDeviceGetComputeRunningProcesses_v3";

#[cfg(feature = "live")]
/// Runs `f` (a call into nvml-wrapper), turning a panic into [`TelemetryError::Failed`].
fn guarded<T>(
    call: &'static str,
    device: Option<u32>,
    f: impl FnOnce() -> Result<T, WrapperError>,
) -> Result<T, TelemetryError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r.map_err(|e| TelemetryError::from_wrapper(call, device, e)),
        Err(_) => Err(TelemetryError::Failed {
            call,
            device,
            detail: "panic in nvml-wrapper (caught)".to_string(),
        }),
    }
}

/// The wall clock, ns since the Unix epoch (0 before 1970, `u64::MAX` after 2554).
pub fn now_unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(feature = "live")]
/// NVML on this host: the live [`Telemetry`] (Cargo feature `live`, on by default).
///
/// Holds one NVML initialisation (`nvmlInit_v2`; `nvmlShutdown` when dropped: NVML counts
/// them, so several may live at once). `Send + Sync`.
#[derive(Debug)]
pub struct Nvml {
    nvml: nvml_wrapper::Nvml,
}

#[cfg(feature = "live")]
impl Nvml {
    /// Loads `libnvidia-ml.so.1` (the dynamic linker's search) and initialises NVML.
    ///
    /// # Errors
    /// [`TelemetryError::Unavailable`] when the library is missing, the driver is not loaded
    /// (no GPU), or the library is not NVML; [`TelemetryError::NoPermission`] or
    /// [`TelemetryError::Failed`] when `nvmlInit_v2` refuses otherwise.
    #[doc(alias = "nvmlInit_v2")]
    pub fn init() -> Result<Nvml, TelemetryError> {
        guarded(CALL_INIT, None, nvml_wrapper::Nvml::init).map(|nvml| Nvml { nvml })
    }

    /// As [`Nvml::init`], loading the NVML library at `path` (a file name for the dynamic
    /// linker's search, or a path).
    ///
    /// # Errors
    /// As [`Nvml::init`].
    pub fn init_from(path: impl AsRef<OsStr>) -> Result<Nvml, TelemetryError> {
        let path = path.as_ref();
        guarded(CALL_INIT, None, || {
            nvml_wrapper::Nvml::builder().lib_path(path).init()
        })
        .map(|nvml| Nvml { nvml })
    }

    /// The NVIDIA driver's version (`nvmlSystemGetDriverVersion`), e.g. `580.95.05`.
    ///
    /// # Errors
    /// [`TelemetryError::Failed`] (or another variant) when NVML cannot say.
    #[doc(alias = "nvmlSystemGetDriverVersion")]
    pub fn driver_version(&self) -> Result<String, TelemetryError> {
        guarded("nvmlSystemGetDriverVersion", None, || {
            self.nvml.sys_driver_version()
        })
    }
}

#[cfg(feature = "live")]
impl Telemetry for Nvml {
    fn gpus(&self) -> Result<Vec<Gpu>, TelemetryError> {
        let count = guarded(CALL_COUNT, None, || self.nvml.device_count())?;
        let nonempty = |s: String| Some(s).filter(|s| !s.trim().is_empty());
        let mut out = Vec::new();
        for index in 0..count {
            let Ok(device) = guarded(CALL_HANDLE, Some(index), || {
                self.nvml.device_by_index(index)
            }) else {
                continue;
            };
            let read = |f: &dyn Fn() -> Result<String, WrapperError>| {
                catch_unwind(AssertUnwindSafe(f))
                    .ok()
                    .and_then(Result::ok)
                    .and_then(nonempty)
            };
            let mig = catch_unwind(AssertUnwindSafe(|| device.mig_mode()))
                .ok()
                .and_then(Result::ok)
                .is_some_and(|m| m.current != 0);
            out.push(Gpu {
                index,
                name: read(&|| device.name()),
                uuid: read(&|| device.uuid()),
                mig,
            });
        }
        Ok(out)
    }

    fn energy(&self, index: u32) -> Result<EnergyReading, TelemetryError> {
        let device = guarded(CALL_HANDLE, Some(index), || {
            self.nvml.device_by_index(index)
        })?;
        let before = now_unix_ns();
        let energy_mj = guarded(CALL_ENERGY, Some(index), || {
            device.total_energy_consumption()
        })?;
        let after = now_unix_ns().max(before);
        Ok(EnergyReading {
            index,
            timestamp_ns: before + (after - before) / 2,
            energy_mj,
        })
    }

    fn processes(&self, index: u32) -> Result<Vec<GpuProcess>, TelemetryError> {
        use nvml_wrapper::enums::device::UsedGpuMemory;
        let device = guarded(CALL_HANDLE, Some(index), || {
            self.nvml.device_by_index(index)
        })?;
        let listed = guarded(CALL_PROCESSES, Some(index), || {
            device.running_compute_processes()
        })?;
        Ok(listed
            .into_iter()
            .map(|p| GpuProcess {
                pid: p.pid,
                used_memory_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(bytes) => Some(bytes),
                    UsedGpuMemory::Unavailable => None,
                },
            })
            .collect())
    }
}

#[cfg(all(test, feature = "live"))]
mod tests;
