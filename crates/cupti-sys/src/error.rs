//! Errors of this crate and the table of CUPTI result codes (`CUptiResult`).

use std::fmt;
use std::path::PathBuf;

use crate::v13_4 as h;

/// Errors of loading libcupti and of calling into it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CuptiError {
    /// No libcupti could be loaded (see [`LoadError`] for every path tried).
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The loaded libcupti lacks a function (an older CUPTI than the bindings).
    #[error("libcupti has no symbol `{name}` (a CUPTI older than the function?)")]
    MissingSymbol {
        /// The C name of the function.
        name: String,
    },
    /// A CUPTI function returned a result other than `CUPTI_SUCCESS`.
    #[error("{function} failed: {name} ({code}): {message}")]
    Api {
        /// The C name of the function that failed, e.g. `"cuptiActivityEnable"`.
        function: &'static str,
        /// The raw `CUptiResult` value.
        code: u32,
        /// Its CUPTI name, e.g. `"CUPTI_ERROR_NOT_INITIALIZED"`, or
        /// [`ResultCode::UNEXPECTED_NAME`] for a code the 12.8 and 13.4 headers do not define.
        name: &'static str,
        /// What it means: the library's own message where it has one, else the header's.
        message: String,
    },
    /// The loaded libcupti lacks a whole optional API (e.g. the SASS metrics API, which
    /// CUPTI has since CUDA 12.4).
    #[error("the {api} API is not supported by this libcupti (it has no `{missing}`)")]
    NotSupported {
        /// The API, e.g. `"SASS metrics"`.
        api: &'static str,
        /// The first of its functions the library lacks.
        missing: String,
    },
    /// An activity buffer or a record pointer returned by CUPTI is out of bounds.
    #[error("invalid activity buffer: {reason}")]
    InvalidBuffer {
        /// What is wrong, with the sizes and offsets involved.
        reason: String,
    },
}

impl CuptiError {
    /// The raw `CUptiResult` of an [`CuptiError::Api`] error, `None` for the other variants.
    pub fn code(&self) -> Option<u32> {
        match self {
            CuptiError::Api { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// `true` when CUPTI could not initialise its connection to the CUDA driver
    /// (`CUPTI_ERROR_NOT_INITIALIZED`): typically a machine without a GPU or driver.
    pub fn is_not_initialized(&self) -> bool {
        self.code() == Some(h::CUPTI_ERROR_NOT_INITIALIZED)
    }
}

/// One candidate library path that could not be used, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadAttempt {
    /// The path (or bare file name, searched by the dynamic linker) that was tried.
    pub path: PathBuf,
    /// Why it was not used: not found, `dlopen` error, or not a CUPTI library.
    pub reason: String,
}

/// No libcupti could be loaded: every path tried, in search order, with its reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    /// Every candidate tried, in order.
    pub attempts: Vec<LoadAttempt>,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "could not load libcupti (set GPUMETER_CUPTI_LIB to its path); tried {} path(s)",
            self.attempts.len()
        )?;
        for a in &self.attempts {
            write!(f, "\n  {}: {}", a.path.display(), a.reason)?;
        }
        Ok(())
    }
}

impl std::error::Error for LoadError {}

/// A `CUptiResult` value, converted by matching against the values the CUPTI 12.8 and 13.4
/// headers define (never transmuted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResultCode {
    /// A value the headers define.
    Known {
        /// The raw value.
        code: u32,
        /// Its CUPTI name, e.g. `"CUPTI_ERROR_INVALID_KIND"`.
        name: &'static str,
        /// The header's description of it.
        message: &'static str,
    },
    /// A value neither header defines (a newer CUPTI, or a corrupt value).
    Unexpected(u32),
}

macro_rules! result_table {
    ($($name:ident => $message:literal,)*) => {
        /// Every `CUptiResult` of the 12.8 and 13.4 headers (13.4 adds 46 and 47), with its
        /// name and the header's description; the values come from the generated bindings.
        const RESULT_CODES: &[(u32, &str, &str)] = &[$((h::$name, stringify!($name), $message),)*];
    };
}

result_table! {
    CUPTI_SUCCESS => "No error.",
    CUPTI_ERROR_INVALID_PARAMETER => "One or more of the parameters is invalid.",
    CUPTI_ERROR_INVALID_DEVICE => "The device does not correspond to a valid CUDA device.",
    CUPTI_ERROR_INVALID_CONTEXT => "The context is NULL or not valid.",
    CUPTI_ERROR_INVALID_EVENT_DOMAIN_ID => "The event domain id is invalid.",
    CUPTI_ERROR_INVALID_EVENT_ID => "The event id is invalid.",
    CUPTI_ERROR_INVALID_EVENT_NAME => "The event name is invalid.",
    CUPTI_ERROR_INVALID_OPERATION =>
        "The current operation cannot be performed due to dependency on other factors.",
    CUPTI_ERROR_OUT_OF_MEMORY =>
        "Unable to allocate enough memory to perform the requested operation.",
    CUPTI_ERROR_HARDWARE => "An error occurred on the performance monitoring hardware.",
    CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT =>
        "The output buffer size is not sufficient to return all requested data.",
    CUPTI_ERROR_API_NOT_IMPLEMENTED => "API is not implemented.",
    CUPTI_ERROR_MAX_LIMIT_REACHED => "The maximum limit is reached.",
    CUPTI_ERROR_NOT_READY => "The object is not yet ready to perform the requested operation.",
    CUPTI_ERROR_NOT_COMPATIBLE =>
        "The current operation is not compatible with the current state of the object.",
    CUPTI_ERROR_NOT_INITIALIZED =>
        "CUPTI is unable to initialize its connection to the CUDA driver.",
    CUPTI_ERROR_INVALID_METRIC_ID => "The metric id is invalid.",
    CUPTI_ERROR_INVALID_METRIC_NAME => "The metric name is invalid.",
    CUPTI_ERROR_QUEUE_EMPTY => "The queue is empty.",
    CUPTI_ERROR_INVALID_HANDLE => "Invalid handle (internal?).",
    CUPTI_ERROR_INVALID_STREAM => "Invalid stream.",
    CUPTI_ERROR_INVALID_KIND => "Invalid kind.",
    CUPTI_ERROR_INVALID_EVENT_VALUE => "Invalid event value.",
    CUPTI_ERROR_DISABLED => "CUPTI is disabled due to conflicts with other enabled profilers.",
    CUPTI_ERROR_INVALID_MODULE => "Invalid module.",
    CUPTI_ERROR_INVALID_METRIC_VALUE => "Invalid metric value.",
    CUPTI_ERROR_HARDWARE_BUSY => "The performance monitoring hardware is in use by other client.",
    CUPTI_ERROR_NOT_SUPPORTED =>
        "The attempted operation is not supported on the current system or device.",
    CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED =>
        "Unified memory profiling is not supported on the system.",
    CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_ON_DEVICE =>
        "Unified memory profiling is not supported on the device.",
    CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_ON_NON_P2P_DEVICES =>
        "Unified memory profiling is not supported on a multi-GPU configuration without P2P \
         support between any pair of devices.",
    CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_WITH_MPS =>
        "Unified memory profiling is not supported under the Multi-Process Service (MPS) \
         environment.",
    CUPTI_ERROR_CDP_TRACING_NOT_SUPPORTED =>
        "Devices with compute capability 7.0 don't support CDP tracing.",
    CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED =>
        "Profiling on virtualized GPU is not supported.",
    CUPTI_ERROR_CUDA_COMPILER_NOT_COMPATIBLE =>
        "Profiling results might be incorrect for CUDA applications compiled with nvcc older \
         than 9.0 for devices with compute capability 6.0 and 6.1.",
    CUPTI_ERROR_INSUFFICIENT_PRIVILEGES =>
        "User doesn't have sufficient privileges which are required to start the profiling \
         session (access to the GPU performance counters may be restricted).",
    CUPTI_ERROR_OLD_PROFILER_API_INITIALIZED =>
        "The legacy CUPTI event/metric API is not compatible with the Profiling API.",
    CUPTI_ERROR_OPENACC_UNDEFINED_ROUTINE =>
        "Missing definition of the OpenACC API routine in the linked OpenACC library.",
    CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED =>
        "The legacy CUPTI event/metric API is not supported on this device.",
    CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED =>
        "CUPTI doesn't allow multiple callback subscribers (another profiler or NVIDIA tool \
         may hold CUPTI).",
    CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES =>
        "Profiling on virtualized GPU is not allowed by hypervisor.",
    CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED =>
        "Profiling and tracing are not allowed when confidential computing mode is enabled.",
    CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED =>
        "CUPTI does not support NVIDIA Crypto Mining Processors (CMP).",
    CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED =>
        "Profiling on Multi-instance GPU (MIG) is not supported.",
    CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED => "Profiling on SLI device is not supported.",
    CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED => "Profiling on WSL device is not supported.",
    CUPTI_ERROR_INVALID_CHIP_NAME =>
        "Invalid or unsupported chip name passed to cuptiProfilerHostInitialize.",
    CUPTI_ERROR_HES_TRACE_NOT_SUPPORTED_ON_MPS =>
        "Hardware Event System (HES) trace is not supported on MPS.",
    CUPTI_ERROR_UNKNOWN => "An unknown internal error has occurred.",
}

impl ResultCode {
    /// The name given to codes the headers do not define.
    pub const UNEXPECTED_NAME: &'static str = "CUPTI_RESULT_UNEXPECTED";

    /// The code for a raw `CUptiResult`.
    ///
    /// ```
    /// use cupti_sys::ResultCode;
    /// assert_eq!(ResultCode::from_raw(15).name(), "CUPTI_ERROR_NOT_INITIALIZED");
    /// assert_eq!(ResultCode::from_raw(4242), ResultCode::Unexpected(4242));
    /// ```
    pub fn from_raw(code: u32) -> ResultCode {
        RESULT_CODES.iter().find(|(c, _, _)| *c == code).map_or(
            ResultCode::Unexpected(code),
            |&(code, name, message)| ResultCode::Known {
                code,
                name,
                message,
            },
        )
    }

    /// The raw value.
    pub fn code(&self) -> u32 {
        match *self {
            ResultCode::Known { code, .. } | ResultCode::Unexpected(code) => code,
        }
    }

    /// The CUPTI name, or [`ResultCode::UNEXPECTED_NAME`].
    pub fn name(&self) -> &'static str {
        match *self {
            ResultCode::Known { name, .. } => name,
            ResultCode::Unexpected(_) => Self::UNEXPECTED_NAME,
        }
    }

    /// The header's description, or a generic one for an unexpected code.
    pub fn message(&self) -> &'static str {
        match *self {
            ResultCode::Known { message, .. } => message,
            ResultCode::Unexpected(_) => {
                "A result code the CUPTI 12.8 and 13.4 headers do not define."
            }
        }
    }

    /// `true` for `CUPTI_SUCCESS`.
    pub fn is_success(&self) -> bool {
        self.code() == h::CUPTI_SUCCESS
    }

    /// Every code the headers define, in header order.
    pub fn all_known() -> impl Iterator<Item = ResultCode> {
        RESULT_CODES
            .iter()
            .map(|&(code, name, message)| ResultCode::Known {
                code,
                name,
                message,
            })
    }
}

impl fmt::Display for ResultCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_codes_are_unexpected() {
        for code in [48, 100, 998, 1000, 0x7fff_ffff, u32::MAX] {
            let r = ResultCode::from_raw(code);
            assert_eq!(r, ResultCode::Unexpected(code));
            assert_eq!(r.name(), ResultCode::UNEXPECTED_NAME);
            assert_eq!(r.code(), code);
            assert!(!r.is_success());
        }
    }

    #[test]
    fn known_codes_round_trip() {
        let cases = [
            (0, "CUPTI_SUCCESS"),
            (12, "CUPTI_ERROR_MAX_LIMIT_REACHED"),
            (15, "CUPTI_ERROR_NOT_INITIALIZED"),
            (21, "CUPTI_ERROR_INVALID_KIND"),
            (39, "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"),
            (47, "CUPTI_ERROR_HES_TRACE_NOT_SUPPORTED_ON_MPS"),
            (999, "CUPTI_ERROR_UNKNOWN"),
        ];
        for (code, name) in cases {
            let r = ResultCode::from_raw(code);
            assert_eq!((r.code(), r.name()), (code, name));
            assert!(!r.message().is_empty());
        }
        assert!(ResultCode::from_raw(0).is_success());
    }

    /// Every `CUptiResult` constant of both generated files is in the table, with its name.
    #[test]
    fn table_covers_both_headers() {
        for (file, text) in [
            (
                "cupti_12_8.rs",
                include_str!("../../../bindings/cupti/cupti_12_8.rs"),
            ),
            (
                "cupti_13_4.rs",
                include_str!("../../../bindings/cupti/cupti_13_4.rs"),
            ),
        ] {
            let mut n = 0;
            for line in text.lines() {
                let Some(rest) = line.strip_prefix("pub const ") else {
                    continue;
                };
                let Some((name, value)) = rest.split_once(": CUptiResult = ") else {
                    continue;
                };
                if name == "CUPTI_ERROR_FORCE_INT" {
                    continue;
                }
                let value: u32 = value
                    .trim_end_matches(';')
                    .parse()
                    .expect("integer constant");
                let r = ResultCode::from_raw(value);
                assert_eq!(r.name(), name, "{file}: {name} = {value}");
                n += 1;
            }
            assert!(n >= 47, "{file}: only {n} result constants found");
        }
        assert_eq!(ResultCode::all_known().count(), 49);
    }
}
