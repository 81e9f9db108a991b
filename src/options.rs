//! What a caller asks of metering: the input format ([`Format`], `--format`) and the options of
//! `gpumeter usage` ([`UsageOptions`]).

use std::path::PathBuf;

#[cfg(feature = "cupti")]
use crate::cupti::ApiVersion;
use gpumeter_core::MeterConfig;

#[cfg(feature = "cupti")]
use crate::Error;

/// The format of an input (`--format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Format {
    /// Detect per file from its first bytes: the `.gmr` magic, SQLite's magic, gzip's magic
    /// (Kineto) or `{`, else a raw CUPTI buffer when its first 4 bytes are an activity kind of
    /// the selected CUPTI API version. A `{` file is a usage report when its top-level
    /// `schema` is `gpumeter.usage/v1`, found by reading its keys in order and skipping their
    /// values up to `schema` (a report, whatever its key order) or `traceEvents` (a Kineto
    /// trace, read no further); else it is Kineto.
    #[default]
    Auto,
    /// PyTorch profiler / Kineto trace JSON, plain or gzip.
    Kineto,
    /// Nsight Systems SQLite export.
    Nsys,
    /// A gpumeter `.gmr` recording.
    Gmr,
    /// One raw CUPTI activity buffer, laid out by `UsageOptions::cupti_api` (Cargo feature `cupti`).
    Cupti,
    /// A `gpumeter.usage/v1` report that an agent metered; several merge
    /// ([`merge_usage_reports`](crate::merge_usage_reports)).
    Usage,
}

/// How inputs are read and metered (the options of `gpumeter usage`).
#[derive(Debug, Clone, Default)]
pub struct UsageOptions {
    /// Input format; `Auto` detects it per file.
    pub format: Format,
    /// Meter configuration: window, `--tenant`, reordering horizon.
    pub meter: MeterConfig,
    /// Device catalog (`--devices FILE`), overriding sources field by field.
    pub devices: Option<PathBuf>,
    /// Tenant map (`--tenant-map FILE`, TOML `[external]` / `[pid]`): rules that attribute
    /// usage by external correlation id, then process id, before [`MeterConfig::tenant`].
    pub tenant_map: Option<PathBuf>,
    /// The producer's CUPTI API version for raw CUPTI buffers (`--cupti-api-version`): its
    /// `CUPTI_API_VERSION` number, 26 (CUDA 12.8), 130000 or 130001 (CUDA 13.0) or 130401
    /// (CUDA 13.4), as `ApiVersion::cupti_api_version` gives it; `None` is 26. A `.gmr` names
    /// its own.
    ///
    /// A number, and there whatever the Cargo features, so that the struct has the same fields
    /// in every build: a literal that names every field still compiles when another crate of
    /// the build turns on `cupti` (features add, never change, the API). It is read only with
    /// the feature `cupti`, where a number whose record layouts the decoder does not know is
    /// [`Error::CuptiApiVersion`](crate::Error::CuptiApiVersion) once a raw buffer is tried.
    pub cupti_api: Option<u32>,
    /// Opening state (`--opening FILE`): an earlier `gpumeter.usage/v1` report whose
    /// `open_allocations` are still held at its end; they are billed on from there.
    pub opening: Option<PathBuf>,
}

/// The record layouts of [`UsageOptions::cupti_api`] (`None`: CUDA 12.8's, 26).
#[cfg(feature = "cupti")]
pub(crate) fn cupti_api(options: &UsageOptions) -> Result<ApiVersion, Error> {
    match options.cupti_api {
        None => Ok(ApiVersion::default()),
        Some(version) => ApiVersion::from_cupti(version).map_err(|e| Error::CuptiApiVersion {
            version,
            reason: e.to_string(),
        }),
    }
}
