//! Why a [`Collector`](crate::Collector) could not start, or a CUPTI call failed: [`CollectorError`].

use std::path::PathBuf;

use cupti_sys::{CuptiError, LoadError};
use gpumeter_cupti::layout::ApiVersion;

use crate::flops::FlopsError;
use crate::pmsampling::PmSamplingError;

/// Why a [`Collector`](crate::Collector) could not start (or a CUPTI call failed).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CollectorError {
    /// No libcupti could be loaded: every path tried, and why.
    #[error(transparent)]
    LibraryMissing(LoadError),
    /// No CUDA driver or GPU: CUPTI answered `CUPTI_ERROR_NOT_INITIALIZED`, or
    /// `cuptiGetVersion` failed and the CUDA driver library cannot be loaded.
    #[error("no CUDA driver or GPU to collect from: {detail}")]
    NoGpu {
        /// The CUPTI function that failed.
        function: &'static str,
        /// CUPTI's result and message.
        detail: String,
    },
    /// Another profiler or NVIDIA tool holds CUPTI in this process
    /// (`CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED`): e.g. Nsight Systems, Nsight
    /// Compute, or a framework profiler that subscribed first.
    #[error(
        "another profiler holds CUPTI in this process ({function}: {detail}); \
         gpumeter cannot collect alongside it"
    )]
    AnotherProfiler {
        /// The CUPTI function that failed.
        function: &'static str,
        /// CUPTI's result and message.
        detail: String,
    },
    /// The loaded libcupti reports a CUPTI API version whose record layouts this build does
    /// not know.
    #[error(
        "{}: CUPTI API version {api_version} is not supported by this build of gpumeter \
         (it decodes {}); use a supported libcupti (GPUMETER_CUPTI_LIB)",
        path.display(),
        ApiVersion::ALL.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")
    )]
    UnsupportedVersion {
        /// The library's path.
        path: PathBuf,
        /// What `cuptiGetVersion()` returned.
        api_version: u32,
    },
    /// A collector is already running in this process.
    #[error("a gpumeter collector is already running in this process")]
    AlreadyRunning,
    /// The process already uses another libcupti file.
    #[error(
        "this process already collects with {}; cannot switch to {} (libcupti is never \
         unloaded)",
        loaded.display(),
        requested.display()
    )]
    LibraryConflict {
        /// The library in use.
        loaded: PathBuf,
        /// The library asked for.
        requested: PathBuf,
    },
    /// The configuration is invalid (the message names the field).
    #[error("invalid collector configuration: {0}")]
    Config(String),
    /// Instrumented mode was asked for ([`CollectorConfig::instructions`](crate::CollectorConfig::instructions)) but the libcupti in
    /// use has no SASS metrics API (CUDA 12.4 and newer have it), or the launch callbacks could
    /// not be enabled.
    #[error(
        "instruction counts (instrumented mode) need CUPTI's SASS metrics API (CUDA 12.4 and \
         newer have it): {0}"
    )]
    InstructionsNotSupported(#[source] CuptiError),
    /// PM sampling ([`CollectorConfig::pm_sampling`](crate::CollectorConfig::pm_sampling)) cannot run: the libcupti lacks the API
    /// (before CUDA 12.6), or its decode thread cannot be started.
    #[error(transparent)]
    PmSampling(#[from] PmSamplingError),
    /// FLOP counters ([`CollectorConfig::flops`](crate::CollectorConfig::flops)) cannot run: the libcupti lacks the range
    /// profiler (before CUDA 12.6).
    #[error(transparent)]
    Flops(#[from] FlopsError),
    /// A CUPTI call failed otherwise.
    #[error(transparent)]
    Cupti(CuptiError),
    /// The sink could not begin the recording.
    #[error("cannot begin the recording: {0}")]
    Sink(#[source] gpumeter_recording::gmr::GmrError),
}

impl CollectorError {
    /// The typed error for a failed CUPTI call: NOT_INITIALIZED → [`CollectorError::NoGpu`],
    /// MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED → [`CollectorError::AnotherProfiler`], else
    /// [`CollectorError::Cupti`].
    pub fn from_cupti(e: CuptiError) -> CollectorError {
        const NOT_INITIALIZED: u32 = cupti_sys::v13_4::CUPTI_ERROR_NOT_INITIALIZED;
        const MULTIPLE: u32 = cupti_sys::v13_4::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
        match (&e, e.code()) {
            (CuptiError::Api { function, .. }, Some(NOT_INITIALIZED)) => CollectorError::NoGpu {
                function,
                detail: e.to_string(),
            },
            (CuptiError::Api { function, .. }, Some(MULTIPLE)) => CollectorError::AnotherProfiler {
                function,
                detail: e.to_string(),
            },
            _ => CollectorError::Cupti(e),
        }
    }
}
