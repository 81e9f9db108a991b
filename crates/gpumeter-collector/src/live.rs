//! The process-wide state behind the C callbacks: one libcupti (loaded on first use, never
//! unloaded), one [`Core`] and at most one running collector.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use cupti_sys::{Cupti, SearchLocation, ENV_CUPTI_LIB};
use gpumeter_cupti::layout::ApiVersion;

use crate::completion::Core;
use crate::config::CollectorConfig;
use crate::driver;
use crate::error::CollectorError;

/// The process-wide state behind the C callbacks.
pub(crate) struct Live {
    pub(crate) cupti: &'static Cupti,
    pub(crate) core: Core,
}

pub(crate) static LIVE: OnceLock<Live> = OnceLock::new();
static RUNNING: AtomicBool = AtomicBool::new(false);

/// Releases [`RUNNING`] on drop unless defused.
pub(crate) struct RunningGuard(pub(crate) bool);

impl RunningGuard {
    pub(crate) fn claim() -> Result<RunningGuard, CollectorError> {
        RUNNING
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .map(|_| RunningGuard(true))
            .map_err(|_| CollectorError::AlreadyRunning)
    }
    pub(crate) fn defuse(mut self) {
        self.0 = false;
    }
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        if self.0 {
            RUNNING.store(false, Ordering::SeqCst);
        }
    }
}

/// Where to look for libcupti for `config`.
pub(crate) fn locations(config: &CollectorConfig) -> Vec<SearchLocation> {
    if let Some(p) = &config.cupti_lib {
        return vec![SearchLocation::File(p.clone())];
    }
    let env_set = std::env::var_os(ENV_CUPTI_LIB).is_some_and(|v| !v.is_empty());
    let mut out = Vec::new();
    if !env_set {
        for soname in ["libcupti.so.13", "libcupti.so.12"] {
            if driver::already_loaded(soname) {
                out.push(SearchLocation::LinkerSearch(soname));
            }
        }
    }
    if config.search_python {
        out.extend(cupti_sys::search_locations());
    } else {
        out.extend(cupti_sys::search_locations_with(
            |k| std::env::var_os(k),
            Vec::new,
        ));
    }
    out
}

pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// The process's libcupti and its layouts: loaded on first use, then always the same.
pub(crate) fn live(
    config: &CollectorConfig,
) -> Result<(&'static Live, ApiVersion), CollectorError> {
    if let Some(live) = LIVE.get() {
        if let Some(p) = &config.cupti_lib {
            if !same_file(p, live.cupti.path()) {
                return Err(CollectorError::LibraryConflict {
                    loaded: live.cupti.path().to_path_buf(),
                    requested: p.clone(),
                });
            }
        }
        return Ok((live, api_version(live.cupti)?));
    }
    let cupti =
        Cupti::load_from_locations(&locations(config)).map_err(CollectorError::LibraryMissing)?;
    // Never unloaded (see `cupti_sys::Cupti`): the callbacks may run until the process ends.
    let cupti: &'static Cupti = Box::leak(Box::new(cupti));
    let api = api_version(cupti)?;
    let live = LIVE.get_or_init(|| Live {
        cupti,
        core: Core::new(config.buffer_size, config.pooled_buffers),
    });
    Ok((live, api))
}

/// The layouts of `cupti`'s buffers, from `cuptiGetVersion()`.
pub(crate) fn api_version(cupti: &Cupti) -> Result<ApiVersion, CollectorError> {
    match cupti.version() {
        Ok(v) => ApiVersion::from_cupti(v).map_err(|_| CollectorError::UnsupportedVersion {
            path: cupti.path().to_path_buf(),
            api_version: v,
        }),
        Err(e) if e.is_not_initialized() => Err(CollectorError::from_cupti(e)),
        // CUPTI 13.x answers CUPTI_ERROR_UNKNOWN to everything without a driver.
        Err(e) if !driver::driver_loadable() => Err(CollectorError::NoGpu {
            function: "cuptiGetVersion",
            detail: format!("{e}; the CUDA driver library (libcuda.so.1) cannot be loaded"),
        }),
        Err(e) => Err(CollectorError::Cupti(e)),
    }
}
