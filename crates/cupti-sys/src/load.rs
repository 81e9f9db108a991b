//! Finding and loading libcupti, and the safe wrappers around it.
//!
//! This module calls into libcupti through function pointers, so it allows `unsafe_code`;
//! every `unsafe` block says why it is sound in a `// SAFETY:` comment.
#![allow(unsafe_code)]

use std::ffi::{CStr, OsString};
use std::io::Read;
use std::mem::ManuallyDrop;
use std::os::raw::c_char;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use libloading::Library;

use crate::error::{CuptiError, LoadAttempt, LoadError, ResultCode};
use crate::{v12_8, v13_4};

/// The environment variable naming the libcupti file to load; when set (and not empty) it is
/// the only place [`Cupti::load`] looks.
pub const ENV_CUPTI_LIB: &str = "GPUMETER_CUPTI_LIB";

/// The file names tried in each searched directory, in order.
pub const LIB_NAMES: [&str; 3] = ["libcupti.so", "libcupti.so.13", "libcupti.so.12"];

/// How long [`search_locations`] waits for `python3` to print its `sys.path`.
const PYTHON_TIMEOUT: Duration = Duration::from_secs(5);

/// `CUPTI_SUCCESS`, the same value in every CUPTI version.
const SUCCESS: u32 = v13_4::CUPTI_SUCCESS;

/// Which generated bindings drive a loaded library.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BindingsVersion {
    /// [`v12_8`]: CUPTI API versions below 130000 (CUDA 12.x and older).
    V12_8,
    /// [`v13_4`]: CUPTI API versions 130000 and above (CUDA 13.x).
    V13_4,
}

impl BindingsVersion {
    /// The bindings for a library reporting `api_version` from `cuptiGetVersion()`.
    ///
    /// CUDA 13 numbers CUPTI API versions as `MMmmpp` (13.4.1 is 130401); earlier releases
    /// count up from 1 (12.8 is 26).
    pub fn for_api_version(api_version: u32) -> BindingsVersion {
        if api_version >= 130_000 {
            BindingsVersion::V13_4
        } else {
            BindingsVersion::V12_8
        }
    }

    /// The `CUPTI_API_VERSION` of the headers these bindings were generated from.
    pub fn header_api_version(self) -> u32 {
        match self {
            BindingsVersion::V12_8 => v12_8::CUPTI_API_VERSION,
            BindingsVersion::V13_4 => v13_4::CUPTI_API_VERSION,
        }
    }
}

/// The generated function table of a loaded library (see [`Cupti::bindings`]).
///
/// Each field is a `Result`: `Err` when the library lacks the function. Read the fields (or
/// use [`Cupti::symbol`]); never call the table's methods, which panic on a missing symbol.
#[derive(Clone, Copy)]
#[non_exhaustive]
pub enum Bindings<'a> {
    /// A CUPTI 12.x library, driven through the 12.8 bindings.
    V12_8(&'a v12_8::Cupti),
    /// A CUPTI 13.x library, driven through the 13.4 bindings.
    V13_4(&'a v13_4::Cupti),
}

impl std::fmt::Debug for Bindings<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Bindings::V12_8(_) => "Bindings::V12_8",
            Bindings::V13_4(_) => "Bindings::V13_4",
        })
    }
}

enum Table {
    V12_8(Box<v12_8::Cupti>),
    V13_4(Box<v13_4::Cupti>),
}

/// A place [`Cupti::load_from_locations`] looks for libcupti.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SearchLocation {
    /// A library file, loaded as is (from [`ENV_CUPTI_LIB`]).
    File(PathBuf),
    /// A directory searched for each of [`LIB_NAMES`], in order.
    Dir(PathBuf),
    /// A file name handed to the dynamic linker's own search (`LD_LIBRARY_PATH`, the
    /// `ld.so` cache, the system directories).
    LinkerSearch(&'static str),
}

/// Where [`Cupti::load`] looks, in order, from this process's environment.
///
/// 1. `GPUMETER_CUPTI_LIB`: when set and not empty, the only location.
/// 2. CUDA installs: for `$CUDA_HOME`, `$CUDA_PATH` and `/usr/local/cuda`, the directories
///    `extras/CUPTI/lib64`, `lib64` and `targets/x86_64-linux/lib`.
/// 3. pip wheels: `nvidia/cuda_cupti/lib` (`nvidia-cuda-cupti-cu12`) and `nvidia/cu13/lib`
///    (`nvidia-cuda-cupti` 13.x) under the site-packages of `$VIRTUAL_ENV` and every entry of
///    `python3`'s `sys.path` (asked with a 5 s timeout; skipped if `python3` is absent).
/// 4. [`LIB_NAMES`] through the dynamic linker's own search.
///
/// Each directory is searched for [`LIB_NAMES`] in order.
pub fn search_locations() -> Vec<SearchLocation> {
    search_locations_with(
        |key| std::env::var_os(key),
        || python_sys_path(PYTHON_TIMEOUT),
    )
}

/// [`search_locations`] with the environment read through `env` and the Python `sys.path`
/// entries from `python_sys_path` (called only when step 1 does not apply).
pub fn search_locations_with(
    env: impl Fn(&str) -> Option<OsString>,
    python_sys_path: impl FnOnce() -> Vec<PathBuf>,
) -> Vec<SearchLocation> {
    let nonempty = |key: &str| env(key).filter(|v| !v.is_empty());
    if let Some(file) = nonempty(ENV_CUPTI_LIB) {
        return vec![SearchLocation::File(PathBuf::from(file))];
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut roots: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .into_iter()
        .filter_map(|k| nonempty(k).map(PathBuf::from))
        .collect();
    roots.push(PathBuf::from("/usr/local/cuda"));
    for root in &roots {
        for sub in ["extras/CUPTI/lib64", "lib64", "targets/x86_64-linux/lib"] {
            dirs.push(root.join(sub));
        }
    }
    let mut site: Vec<PathBuf> = Vec::new();
    if let Some(venv) = nonempty("VIRTUAL_ENV") {
        site.extend(venv_site_packages(Path::new(&venv)));
    }
    site.extend(python_sys_path());
    for s in &site {
        dirs.push(s.join("nvidia/cuda_cupti/lib"));
        dirs.push(s.join("nvidia/cu13/lib"));
    }
    let mut out: Vec<SearchLocation> = Vec::new();
    for d in dirs {
        let loc = SearchLocation::Dir(d);
        if !out.contains(&loc) {
            out.push(loc);
        }
    }
    out.extend(LIB_NAMES.iter().map(|n| SearchLocation::LinkerSearch(n)));
    out
}

/// `$VIRTUAL_ENV/lib/python3*/site-packages`.
fn venv_site_packages(venv: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(venv.join("lib")) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("python"))
        .map(|e| e.path().join("site-packages"))
        .collect();
    out.sort();
    out
}

/// The directories of `python3`'s `sys.path`; empty if `python3` is missing, fails or takes
/// longer than `timeout` (it is then killed).
fn python_sys_path(timeout: Duration) -> Vec<PathBuf> {
    let spawned = Command::new("python3")
        .args([
            "-c",
            "import sys; print('\\n'.join(p for p in sys.path if p))",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = spawned else {
        return Vec::new();
    };
    let reader = child.stdout.take().map(|mut out| {
        std::thread::spawn(move || {
            let mut s = String::new();
            // A read error leaves what was read; the paths are only hints.
            let _ = out.read_to_string(&mut s);
            s
        })
    });
    let deadline = Instant::now() + timeout;
    let ok = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status.success(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                // Timed out, or waiting failed: stop it; errors mean it already exited.
                let _ = child.kill();
                let _ = child.wait();
                break false;
            }
        }
    };
    let text = reader.and_then(|r| r.join().ok()).unwrap_or_default();
    if !ok {
        return Vec::new();
    }
    text.lines()
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.is_dir())
        .collect()
}

/// The outcome of [`Cupti::walk_activity_buffer`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActivityWalk {
    /// `(kind, offset)` of every record in buffer order: the record's `CUpti_ActivityKind`
    /// (its first 4 bytes) and its byte offset from the start of the buffer.
    pub records: Vec<(u32, usize)>,
    /// `true` when CUPTI stopped with `CUPTI_ERROR_INVALID_KIND` (the next record is
    /// incomplete, or of a kind this library does not know) rather than
    /// `CUPTI_ERROR_MAX_LIMIT_REACHED` (every valid byte walked). Records after that point
    /// cannot be reached.
    pub ended_on_invalid_kind: bool,
}

/// A loaded libcupti and the generated function table that matches it.
///
/// The library is opened once per `Cupti` (two `dlopen` handles to the same loaded object: one
/// owned by the generated table, one for [`Cupti::symbol`]) and is **never unloaded**: once
/// called, libcupti leaves thread-specific-data destructors behind, and unloading it makes the
/// next thread that called into it crash when it exits (observed with 12.8). Dropping a
/// `Cupti` therefore releases only the table's handle; it never panics. A collector uses
/// [`Cupti::shared`], one instance for the process.
///
/// All CUPTI versions share the C ABI of the functions wrapped here; the table (and with it
/// the record types of [`Cupti::bindings`]) is chosen from `cuptiGetVersion()` at load time
/// ([`BindingsVersion::for_api_version`]). When that call fails, as CUPTI 13.x does without a
/// driver, the file name decides: `*.so.12*` → 12.8, anything else → 13.4 (CUPTI 12.x answers
/// `cuptiGetVersion` without a driver).
pub struct Cupti {
    table: Table,
    /// Never closed: see the type's docs.
    library: ManuallyDrop<Library>,
    path: PathBuf,
    api_version: Option<u32>,
}

impl std::fmt::Debug for Cupti {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cupti")
            .field("path", &self.path)
            .field("api_version", &self.api_version)
            .field("bindings", &self.bindings_version())
            .finish_non_exhaustive()
    }
}

/// Runs `$body` with `$api` bound to the generated table and `$b` to its module.
macro_rules! with_api {
    ($self:expr, $api:ident, $b:ident => $body:expr) => {
        match &$self.table {
            Table::V12_8($api) => {
                #[allow(unused_imports)]
                use crate::v12_8 as $b;
                $body
            }
            Table::V13_4($api) => {
                #[allow(unused_imports)]
                use crate::v13_4 as $b;
                $body
            }
        }
    };
}

/// The one path from a generated table's `Result` field to a callable function: a missing
/// symbol becomes [`CuptiError::MissingSymbol`].
fn resolve<T: Copy>(
    field: &Result<T, libloading::Error>,
    name: &'static str,
) -> Result<T, CuptiError> {
    match field {
        Ok(f) => Ok(*f),
        Err(_) => Err(CuptiError::MissingSymbol { name: name.into() }),
    }
}

/// Copies a C string returned by CUPTI.
///
/// # Safety
/// `s` is NULL or points to a NUL-terminated string that stays valid during the call.
unsafe fn owned_c_str(s: *const c_char) -> Option<String> {
    if s.is_null() {
        return None;
    }
    // SAFETY: not NULL, and NUL-terminated and live by the caller's contract.
    Some(unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
}

mod pmsampling;
pub use pmsampling::{
    CounterDataInfo, DecodeOutcome, DecodeStopReason, MetricType, PmHost, PmSampler, RangeProfiler,
    RangeStop, TriggerMode, PM_SAMPLING_SYMBOLS, RANGE_PROFILER_SYMBOLS,
};
mod sass;
pub use sass::{
    ProfilerSupport, SassGranularity, SassMetricDetails, SassRecord, SupportLevel,
    SASS_INST_EXECUTED, SASS_METRICS_SYMBOLS,
};

impl Cupti {
    /// Loads libcupti from the first of [`search_locations`] that works.
    ///
    /// # Errors
    /// [`LoadError`] listing every location tried and why it failed.
    pub fn load() -> Result<Cupti, LoadError> {
        Self::load_from_locations(&search_locations())
    }

    /// The process-wide libcupti, loaded by [`Cupti::load`] on first use and never dropped
    /// (CUPTI must stay loaded while it can call back). Later calls return the same result.
    ///
    /// # Errors
    /// [`CuptiError::Load`] when the first load failed.
    pub fn shared() -> Result<&'static Cupti, CuptiError> {
        static SHARED: OnceLock<Result<Cupti, LoadError>> = OnceLock::new();
        match SHARED.get_or_init(Cupti::load) {
            Ok(c) => Ok(c),
            Err(e) => Err(CuptiError::Load(e.clone())),
        }
    }

    /// Loads the library file at `path` (no search).
    ///
    /// # Errors
    /// [`LoadError`] with the one attempt, naming `path`.
    pub fn load_from(path: impl AsRef<Path>) -> Result<Cupti, LoadError> {
        Self::load_from_locations(&[SearchLocation::File(path.as_ref().to_path_buf())])
    }

    /// Loads libcupti from the first of `locations` that works.
    ///
    /// A file that does not exist, cannot be opened, or has no `cuptiGetVersion` is skipped
    /// and recorded in the error.
    ///
    /// # Errors
    /// [`LoadError`] listing every location tried, in order, and why each failed.
    pub fn load_from_locations(locations: &[SearchLocation]) -> Result<Cupti, LoadError> {
        let mut attempts = Vec::new();
        for loc in locations {
            match loc {
                SearchLocation::File(path) => match Self::open(path) {
                    Ok(c) => return Ok(c),
                    Err(reason) => attempts.push(LoadAttempt {
                        path: path.clone(),
                        reason,
                    }),
                },
                SearchLocation::Dir(dir) => {
                    let mut any = false;
                    for name in LIB_NAMES {
                        let path = dir.join(name);
                        if !path.exists() {
                            continue;
                        }
                        any = true;
                        match Self::open(&path) {
                            Ok(c) => return Ok(c),
                            Err(reason) => attempts.push(LoadAttempt { path, reason }),
                        }
                    }
                    if !any {
                        attempts.push(LoadAttempt {
                            path: dir.clone(),
                            reason: format!("no {} here", LIB_NAMES.join(", ")),
                        });
                    }
                }
                SearchLocation::LinkerSearch(name) => match Self::open(Path::new(name)) {
                    Ok(c) => return Ok(c),
                    Err(reason) => attempts.push(LoadAttempt {
                        path: PathBuf::from(name),
                        reason,
                    }),
                },
            }
        }
        Err(LoadError { attempts })
    }

    fn open(path: &Path) -> Result<Cupti, String> {
        if path.components().count() > 1 && !path.exists() {
            return Err("no such file".into());
        }
        // SAFETY: loading a shared library runs its initialisers. We only load files the user
        // named as libcupti or that carry libcupti's name; NVIDIA's libcupti initialisers
        // need nothing from the loading process.
        let library = unsafe { Library::new(path) }.map_err(|e| e.to_string())?;
        // SAFETY: as for the call below.
        if unsafe { library.get::<unsafe extern "C" fn(*mut u32) -> u32>(b"cuptiGetVersion\0") }
            .is_err()
        {
            return Err("not a CUPTI library: no symbol cuptiGetVersion".into());
        }
        // From here on libcupti may be called, so it is never unloaded (see `Cupti`).
        let library = ManuallyDrop::new(library);
        let mut version = 0u32;
        {
            // SAFETY: `cuptiGetVersion` has this signature in every CUPTI version
            // (`CUptiResult cuptiGetVersion(uint32_t *version)`).
            let get = unsafe {
                library.get::<unsafe extern "C" fn(*mut u32) -> u32>(b"cuptiGetVersion\0")
            }
            .map_err(|_| "not a CUPTI library: no symbol cuptiGetVersion".to_string())?;
            // SAFETY: `version` is a valid, writable u32 for the duration of the call.
            let rc = unsafe { get(&mut version) };
            if rc != SUCCESS {
                version = 0;
            }
        }
        let api_version = (version != 0).then_some(version);
        let which = match api_version {
            Some(v) => BindingsVersion::for_api_version(v),
            None if path.to_string_lossy().contains(".so.12") => BindingsVersion::V12_8,
            None => BindingsVersion::V13_4,
        };
        let table = match which {
            BindingsVersion::V12_8 => {
                // SAFETY: the same file as above, already loaded: this takes a second handle
                // to it. `from_library` only looks symbols up; missing ones become `Err`
                // fields, and the signatures are those of CUPTI 12.8's headers, which this
                // library's API version (below 130000) shares.
                let t = unsafe { Library::new(path) }
                    .and_then(|lib| {
                        // SAFETY: see above: symbol lookups on the loaded library only.
                        unsafe { v12_8::Cupti::from_library(lib) }
                    })
                    .map_err(|e| e.to_string())?;
                Table::V12_8(Box::new(t))
            }
            BindingsVersion::V13_4 => {
                // SAFETY: as above, with CUPTI 13.4's headers for a 13.x library.
                let t = unsafe { Library::new(path) }
                    .and_then(|lib| {
                        // SAFETY: see above: symbol lookups on the loaded library only.
                        unsafe { v13_4::Cupti::from_library(lib) }
                    })
                    .map_err(|e| e.to_string())?;
                Table::V13_4(Box::new(t))
            }
        };
        Ok(Cupti {
            table,
            library,
            path: path.to_path_buf(),
            api_version,
        })
    }

    /// The path the library was loaded from (a bare file name when the dynamic linker found
    /// it).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The CUPTI API version `cuptiGetVersion()` reported at load time; `None` when it failed
    /// (CUPTI 13.x without a driver).
    pub fn api_version_at_load(&self) -> Option<u32> {
        self.api_version
    }

    /// Which generated bindings drive this library.
    pub fn bindings_version(&self) -> BindingsVersion {
        match self.table {
            Table::V12_8(_) => BindingsVersion::V12_8,
            Table::V13_4(_) => BindingsVersion::V13_4,
        }
    }

    /// The generated function table, for functions without a safe wrapper here.
    pub fn bindings(&self) -> Bindings<'_> {
        match &self.table {
            Table::V12_8(t) => Bindings::V12_8(t),
            Table::V13_4(t) => Bindings::V13_4(t),
        }
    }

    /// Looks up any symbol of the library by its C name.
    ///
    /// # Safety
    /// `T` must be the exact type of the symbol (an `unsafe extern "C" fn` with the C
    /// signature, for a function), and the value must not be used after this `Cupti` is
    /// dropped.
    ///
    /// # Errors
    /// [`CuptiError::MissingSymbol`] when the library has no such symbol.
    pub unsafe fn symbol<T: Copy>(&self, name: &str) -> Result<T, CuptiError> {
        let missing = || CuptiError::MissingSymbol { name: name.into() };
        let mut c_name = name.as_bytes().to_vec();
        if c_name.contains(&0) {
            return Err(missing());
        }
        c_name.push(0);
        // SAFETY: the caller guarantees `T` is the symbol's type.
        let sym = unsafe { self.library.get::<T>(&c_name) }.map_err(|_| missing())?;
        Ok(*sym)
    }

    /// The [`CuptiError::Api`] for `code` returned by `function`: the name from
    /// [`ResultCode`], the message from the library's `cuptiGetErrorMessage` where it says
    /// more than the name, else the header's description.
    pub fn api_error(&self, function: &'static str, code: u32) -> CuptiError {
        let rc = ResultCode::from_raw(code);
        let from_lib = self
            .error_message(code)
            .ok()
            .filter(|m| !m.is_empty() && m != rc.name());
        let message = match (rc, from_lib) {
            (_, Some(m)) => m,
            (ResultCode::Unexpected(_), None) => match self.result_string(code) {
                Ok(s) if !s.is_empty() && s != "<unknown>" => format!("{s} (from libcupti)"),
                _ => rc.message().to_string(),
            },
            (ResultCode::Known { message, .. }, None) => message.to_string(),
        };
        CuptiError::Api {
            function,
            code,
            name: rc.name(),
            message,
        }
    }

    fn check(&self, function: &'static str, code: u32) -> Result<(), CuptiError> {
        if code == SUCCESS {
            Ok(())
        } else {
            Err(self.api_error(function, code))
        }
    }

    /// The CUPTI API version of the library (26 for CUPTI 12.8, 130401 for 13.4).
    ///
    /// # Errors
    /// [`CuptiError::Api`] when the call fails (CUPTI 13.x without a driver returns
    /// `CUPTI_ERROR_UNKNOWN`); [`CuptiError::MissingSymbol`].
    #[doc(alias = "cuptiGetVersion")]
    pub fn version(&self) -> Result<u32, CuptiError> {
        with_api!(self, api, _b => {
            let f = resolve(&api.cuptiGetVersion, "cuptiGetVersion")?;
            let mut v = 0u32;
            // SAFETY: `v` is a valid, writable u32 for the duration of the call.
            let rc = unsafe { f(&mut v) };
            self.check("cuptiGetVersion", rc).map(|()| v)
        })
    }

    /// The library's name for a result code, e.g. `"CUPTI_ERROR_INVALID_KIND"`.
    ///
    /// # Errors
    /// [`CuptiError::Api`] when the library does not know `code` (it answers
    /// `CUPTI_ERROR_INVALID_PARAMETER`) or fails; [`CuptiError::MissingSymbol`].
    #[doc(alias = "cuptiGetResultString")]
    pub fn result_string(&self, code: u32) -> Result<String, CuptiError> {
        with_api!(self, api, _b => {
            let f = resolve(&api.cuptiGetResultString, "cuptiGetResultString")?;
            let mut s: *const c_char = std::ptr::null();
            // SAFETY: `s` is a valid, writable pointer for the duration of the call.
            let rc = unsafe { f(code, &mut s) };
            self.string_result("cuptiGetResultString", rc, s)
        })
    }

    /// The library's message for a result code (CUPTI 12.x answers with the name).
    ///
    /// # Errors
    /// As [`Cupti::result_string`].
    #[doc(alias = "cuptiGetErrorMessage")]
    pub fn error_message(&self, code: u32) -> Result<String, CuptiError> {
        with_api!(self, api, _b => {
            let f = resolve(&api.cuptiGetErrorMessage, "cuptiGetErrorMessage")?;
            let mut s: *const c_char = std::ptr::null();
            // SAFETY: `s` is a valid, writable pointer for the duration of the call.
            let rc = unsafe { f(code, &mut s) };
            self.string_result("cuptiGetErrorMessage", rc, s)
        })
    }

    fn string_result(
        &self,
        function: &'static str,
        rc: u32,
        s: *const c_char,
    ) -> Result<String, CuptiError> {
        if rc != SUCCESS {
            // Not `api_error`: it asks for the message, which would recurse.
            let r = ResultCode::from_raw(rc);
            return Err(CuptiError::Api {
                function,
                code: rc,
                name: r.name(),
                message: r.message().into(),
            });
        }
        // SAFETY: on success CUPTI sets `s` to a static, NUL-terminated string (or leaves it
        // NULL, handled).
        Ok(unsafe { owned_c_str(s) }.unwrap_or_default())
    }

    /// CUPTI's current timestamp, in ns (the clock of activity records: CLOCK_REALTIME on
    /// Linux unless a timestamp callback is registered).
    ///
    /// # Errors
    /// [`CuptiError::Api`], [`CuptiError::MissingSymbol`].
    #[doc(alias = "cuptiGetTimestamp")]
    pub fn timestamp(&self) -> Result<u64, CuptiError> {
        with_api!(self, api, _b => {
            let f = resolve(&api.cuptiGetTimestamp, "cuptiGetTimestamp")?;
            let mut t = 0u64;
            // SAFETY: `t` is a valid, writable u64 for the duration of the call.
            let rc = unsafe { f(&mut t) };
            self.check("cuptiGetTimestamp", rc).map(|()| t)
        })
    }

    /// Enables collection of activity records of `kind` (a `CUPTI_ACTIVITY_KIND_*` value).
    ///
    /// This may initialise CUPTI's connection to the driver. Register buffer callbacks
    /// (through [`Cupti::bindings`]) before records are produced.
    ///
    /// # Errors
    /// [`CuptiError::Api`]: e.g. `CUPTI_ERROR_NOT_INITIALIZED` on a machine without a GPU or
    /// driver ([`CuptiError::is_not_initialized`]), `CUPTI_ERROR_UNKNOWN` from CUPTI 13.x
    /// without a driver; [`CuptiError::MissingSymbol`].
    #[doc(alias = "cuptiActivityEnable")]
    pub fn activity_enable(&self, kind: u32) -> Result<(), CuptiError> {
        with_api!(self, api, _b => {
            let f = resolve(&api.cuptiActivityEnable, "cuptiActivityEnable")?;
            // SAFETY: takes a plain integer; CUPTI validates it.
            let rc = unsafe { f(kind) };
            self.check("cuptiActivityEnable", rc)
        })
    }

    /// Disables collection of activity records of `kind`.
    ///
    /// # Errors
    /// As [`Cupti::activity_enable`].
    #[doc(alias = "cuptiActivityDisable")]
    pub fn activity_disable(&self, kind: u32) -> Result<(), CuptiError> {
        with_api!(self, api, _b => {
            let f = resolve(&api.cuptiActivityDisable, "cuptiActivityDisable")?;
            // SAFETY: takes a plain integer; CUPTI validates it.
            let rc = unsafe { f(kind) };
            self.check("cuptiActivityDisable", rc)
        })
    }

    /// Flushes all activity buffers to the registered buffer-completed callback; `flag` is 0
    /// or `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`.
    ///
    /// # Errors
    /// As [`Cupti::activity_enable`].
    #[doc(alias = "cuptiActivityFlushAll")]
    pub fn activity_flush_all(&self, flag: u32) -> Result<(), CuptiError> {
        with_api!(self, api, _b => {
            let f = resolve(&api.cuptiActivityFlushAll, "cuptiActivityFlushAll")?;
            // SAFETY: takes a plain integer; buffers are handed to callbacks the caller
            // registered (or none).
            let rc = unsafe { f(flag) };
            self.check("cuptiActivityFlushAll", rc)
        })
    }

    /// Walks the records of an activity buffer with `cuptiActivityGetNextRecord`, returning
    /// the kind and byte offset of each.
    ///
    /// `buf[..valid_size]` holds the records (as CUPTI's buffer-completed callback hands them
    /// over). CUPTI requires the buffer to be 8-byte aligned: an unaligned `buf` is copied to
    /// an aligned one first (offsets are the same). The walk ends at
    /// `CUPTI_ERROR_MAX_LIMIT_REACHED` (all valid bytes walked) or `CUPTI_ERROR_INVALID_KIND`
    /// (an incomplete or unknown record: [`ActivityWalk::ended_on_invalid_kind`]). The buffer
    /// is not modified; it is `&mut` because CUPTI's signature is.
    ///
    /// # Errors
    /// [`CuptiError::InvalidBuffer`] when `valid_size > buf.len()` or CUPTI returns a record
    /// outside the valid bytes or not after the previous one; [`CuptiError::Api`] for any
    /// other result (e.g. CUPTI 13.x without a driver); [`CuptiError::MissingSymbol`].
    #[doc(alias = "cuptiActivityGetNextRecord")]
    pub fn walk_activity_buffer(
        &self,
        buf: &mut [u8],
        valid_size: usize,
    ) -> Result<ActivityWalk, CuptiError> {
        if valid_size > buf.len() {
            return Err(CuptiError::InvalidBuffer {
                reason: format!("valid size {valid_size} > buffer length {}", buf.len()),
            });
        }
        if buf.as_ptr().align_offset(8) == 0 {
            return self.walk_aligned(&mut buf[..valid_size]);
        }
        let mut aligned = vec![0u64; valid_size.div_ceil(8)];
        // SAFETY: `aligned` owns `aligned.len() * 8` initialised bytes; viewing u64s as u8s
        // is valid for any value, and the byte slice borrows `aligned` exclusively.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(aligned.as_mut_ptr().cast::<u8>(), aligned.len() * 8)
        };
        bytes[..valid_size].copy_from_slice(&buf[..valid_size]);
        self.walk_aligned(&mut bytes[..valid_size])
    }

    /// [`Cupti::walk_activity_buffer`] on an 8-byte aligned buffer of exactly the valid bytes.
    fn walk_aligned(&self, buf: &mut [u8]) -> Result<ActivityWalk, CuptiError> {
        with_api!(self, api, b => {
            let f = resolve(&api.cuptiActivityGetNextRecord, "cuptiActivityGetNextRecord")?;
            let base = buf.as_mut_ptr();
            let len = buf.len();
            let mut walk = ActivityWalk::default();
            let mut record: *mut b::CUpti_Activity = std::ptr::null_mut();
            loop {
                // SAFETY: `base` points to `len` bytes this function borrows exclusively,
                // 8-byte aligned; `record` is NULL or the record CUPTI returned from this
                // buffer on the previous call, as the function requires.
                let rc = unsafe { f(base, len, &mut record) };
                match rc {
                    SUCCESS => {}
                    b::CUPTI_ERROR_MAX_LIMIT_REACHED => return Ok(walk),
                    b::CUPTI_ERROR_INVALID_KIND => {
                        walk.ended_on_invalid_kind = true;
                        return Ok(walk);
                    }
                    rc => return Err(self.api_error("cuptiActivityGetNextRecord", rc)),
                }
                // Pointer arithmetic on addresses only: nothing is read through `record`.
                let offset = (record as usize).wrapping_sub(base as usize);
                let kind_bytes = offset
                    .checked_add(4)
                    .filter(|end| *end <= len)
                    .and_then(|end| buf.get(offset..end))
                    .and_then(|b| <[u8; 4]>::try_from(b).ok());
                let Some(kind_bytes) = kind_bytes else {
                    return Err(CuptiError::InvalidBuffer {
                        reason: format!(
                            "cuptiActivityGetNextRecord returned a record at offset {offset} \
                             outside the {len} valid bytes"
                        ),
                    });
                };
                if walk.records.last().is_some_and(|&(_, prev)| offset <= prev) {
                    return Err(CuptiError::InvalidBuffer {
                        reason: format!(
                            "cuptiActivityGetNextRecord returned offset {offset}, not after \
                             the previous record's"
                        ),
                    });
                }
                walk.records.push((u32::from_ne_bytes(kind_bytes), offset));
            }
        })
    }
}
