//! # gpumeter-inject
//!
//! The CUDA injection library: `libgpumeter_inject.so` meters any unmodified CUDA
//! program into a `.gmr` recording. The CUDA driver loads the library named by
//! `CUDA_INJECTION64_PATH` when the program initialises CUDA (`cuInit`) and calls its
//! [`InitializeInjection`], which starts a [`gpumeter_collector::Collector`] and registers an exit
//! handler that stops it (forced flush) and finishes the recording. `gpumeter record` sets
//! everything up:
//!
//! ```text
//! gpumeter record --out run.gmr -- python train.py
//! ```
//!
//! or by hand (see `docs/COLLECTION.md`):
//!
//! ```text
//! CUDA_INJECTION64_PATH=/opt/gpumeter/lib/libgpumeter_inject.so \
//! GPUMETER_OUT=/var/lib/gpumeter/%h-%p.gmr  python train.py
//! ```
//!
//! # Environment
//!
//! | variable | meaning |
//! |---|---|
//! | `GPUMETER_OUT` | the recording's path; `%p` → process id, `%h` → host name, `%t` → Unix time (s), `%%` → `%`. Default `gpumeter-%h-%p.gmr` in the working directory. Missing directories are created. If the file exists (another process of the same job wrote it), the recording goes to `<stem>.<pid>.gmr` beside it, then `<stem>.<pid>.1.gmr`, …: an existing file is never overwritten. |
//! | `GPUMETER_CUPTI_LIB` | the libcupti to load. Default: the libcupti the process has already loaded (e.g. PyTorch's), else the CUDA install paths; `python3` is never started from inside the program. |
//! | `GPUMETER_BUFFER_SIZE` | bytes per CUPTI activity buffer (default 8 MiB). |
//! | `GPUMETER_FLUSH_PERIOD_MS` | ask CUPTI to complete buffers at least this often (default: only when full and at exit), bounding what a killed process loses. |
//! | `GPUMETER_ENERGY` | `0`: do not record GPU energy. Default on: each GPU's cumulative NVML energy counter (mJ) is read at start, every interval and at exit, into energy frames (`CollectorConfig::energy`). |
//! | `GPUMETER_ENERGY_INTERVAL_MS` | how often energy is read, 10 … 3600000 ms (default 1000). |
//! | `GPUMETER_INSTRUCTIONS` | `1`: instrumented mode (`CollectorConfig::instructions`): record the warp-level instructions of every kernel launch (CUPTI SASS metrics, CUDA 12.4+). Every launch then waits for its kernels and patched kernels run slower: a report from such a recording carries the instrumentation warning. Its warnings are printed even without `GPUMETER_VERBOSE`. |
//! | `GPUMETER_PM_SAMPLING` | `1`: PM sampling (`CollectorConfig::pm_sampling`, CUDA 12.6+): hardware counters of SM activity (and DRAM bytes where the chip offers them) of every GPU the program creates a context on, sampled at GPU-time intervals into PM-sample frames. Needs GPU performance-counter permission (root, or the driver option `NVreg_RestrictProfilingToAdminUsers=0`); a device that cannot be sampled is reported on stderr, the program runs on. |
//! | `GPUMETER_FLOPS` | `1`: FLOP counters (`CollectorConfig::flops`, CUDA 12.6+): per kernel launch, CUPTI's SASS op counters and the chip's tensor-path operation counters, collected with the range profiler (auto range, kernel replay: kernels are serialized and each runs once per counter pass) into operation-counters frames. Needs GPU performance-counter permission, like PM sampling; a context that cannot be profiled is reported on stderr, the program runs on. A report from such a recording carries the instrumentation warning. |
//! | `GPUMETER_PM_INTERVAL_NS` | time between PM samples, 1000 … 1000000000 ns (default 100000, 100 µs). |
//! | `GPUMETER_VERBOSE` | `1`: say on stderr where the recording goes and what it holds. |
//! | `GPUMETER_TENANT`, `POD_NAMESPACE`, `POD_NAME`, `POD_UID` | not read by the library: recorded as they are in the recording header's `labels` (each under its own name, when set and not empty), with `cgroup`, the process's cgroup path from `/proc/self/cgroup` (the cgroup v2 `0::` line, else the first line), and `pid_ns`, its pid namespace's inode number from `/proc/self/ns/pid` (which, with the header's pid, names the process on its host even where a private cgroup namespace makes `cgroup` read `/`), so that the node agent's tenant rule (`tenant = "{POD_NAMESPACE}"`) can attribute the process's work. Kubernetes sets the `POD_*` variables through the downward API (docs/AGENT.md). |
//!
//! Problems are reported on stderr with the prefix `gpumeter-inject:`; the program itself
//! always runs on. If the collector cannot start, `InitializeInjection` returns 0 and nothing
//! is recorded.
//!
//! # Exports for agents inside the program
//!
//! A program (or a framework plugin) that serves several tenants can tag its work through the
//! already-loaded library (e.g. Python's `ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"])`):
//! [`gpumeter_inject_push_external_id`], [`gpumeter_inject_pop_external_id`] and
//! [`gpumeter_inject_tenant_hint`].
//!
//! Where this crate sits in the flow from sources to the bank, what it owns and what it may
//! depend on: `docs/ARCHITECTURE.md` in the repository.
// Exported C functions (`#[no_mangle]`) and `libc::atexit`: every `unsafe` block has a
// `// SAFETY:` comment, and no panic crosses into C.
#![allow(unsafe_code)]
#![deny(missing_docs)]

use std::ffi::{c_char, c_int, CStr};
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use gpumeter_collector::{
    Collector, CollectorConfig, ExternalKind, FlopsConfig, GmrFileSink, PmSamplingConfig,
    StopReport, ENERGY_INTERVAL_RANGE, PM_INTERVAL_RANGE,
};
use gpumeter_recording::gmr::Producer;

/// Default recording path template (in the working directory).
pub const DEFAULT_OUT: &str = "gpumeter-%h-%p.gmr";

/// The collector this library runs, with where it writes.
struct Running {
    collector: Collector,
    path: PathBuf,
    pid: u32,
    verbose: bool,
}

static INITIALIZED: AtomicBool = AtomicBool::new(false);
static STATE: Mutex<Option<Running>> = Mutex::new(None);

fn state() -> MutexGuard<'static, Option<Running>> {
    STATE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One line on stderr; a closed or failing stderr is ignored (never a panic at exit).
fn say(msg: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "gpumeter-inject: {msg}");
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_string())
}

/// The CUDA driver's entry point: starts metering this process. Returns 1 on success and 0
/// when the collector could not start (the reason is on stderr); CUDA continues either way.
/// Called once per process; later calls return 1 without doing anything.
#[no_mangle]
#[allow(non_snake_case)]
pub extern "C" fn InitializeInjection() -> c_int {
    match catch_unwind(initialize) {
        Ok(Ok(())) => 1,
        Ok(Err(msg)) => {
            say(&format!("not metering this process: {msg}"));
            0
        }
        Err(p) => {
            say(&format!(
                "not metering this process: panic while starting: {}",
                panic_text(p.as_ref())
            ));
            0
        }
    }
}

/// Expands `%p` (process id), `%h` (host name), `%t` (Unix time, s) and `%%` in a path
/// template; any other `%x` is kept as written.
pub fn expand_template(template: &str, pid: u32, host: &str, unix_secs: u64) -> String {
    let mut out = String::with_capacity(template.len() + 16);
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('p') => out.push_str(&pid.to_string()),
            Some('h') => out.push_str(host),
            Some('t') => out.push_str(&unix_secs.to_string()),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// `<stem>.<pid>.<ext>` beside `path` (`run.gmr` → `run.4242.gmr`).
pub fn with_pid(path: &Path, pid: u32) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "gpumeter".to_string());
    let name = match path.extension() {
        Some(ext) => format!("{stem}.{pid}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{pid}"),
    };
    path.with_file_name(name)
}

/// Creates the recording file without clobbering another's: `path` if it does not exist, else
/// [`with_pid`], else `<stem>.<pid>.<n>.<ext>` for the first `n` from 1 that does not exist
/// (a file is never truncated: in a container `%h-%p` repeats — a restarted container, a
/// recreated pod of one name — and the earlier recording may not be billed yet). Missing
/// parent directories are created.
///
/// # Errors
/// The file system's, or `AlreadyExists` when 10 000 names are taken.
fn create_output(path: &Path, pid: u32) -> std::io::Result<(File, PathBuf)> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let alt = with_pid(path, pid);
    // `run.12.gmr` → `run.12.<n>.gmr`; `run.12` (no extension) → `run.12.<n>`.
    let numbered = |n: u32| match path.extension() {
        Some(ext) => {
            let stem = alt.file_stem().unwrap_or_default().to_string_lossy();
            alt.with_file_name(format!("{stem}.{n}.{}", ext.to_string_lossy()))
        }
        None => {
            let mut name = alt.clone().into_os_string();
            name.push(format!(".{n}"));
            PathBuf::from(name)
        }
    };
    let candidates = [path.to_path_buf(), alt.clone()]
        .into_iter()
        .chain((1..10_000).map(numbered));
    let mut last = None;
    for candidate in candidates {
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&candidate)
        {
            Ok(f) => return Ok((f, candidate)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| ErrorKind::AlreadyExists.into()))
}

fn env_nonempty(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.trim().is_empty())
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is 256 writable bytes; gethostname writes at most that many.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast::<c_char>(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match (rc, buf.get(..end)) {
        (0, Some(b)) if !b.is_empty() => String::from_utf8_lossy(b).into_owned(),
        _ => "localhost".to_string(),
    }
}

/// The collector configuration from the environment; bad values are reported and ignored.
fn config_from_env() -> CollectorConfig {
    let mut config = CollectorConfig::default();
    config.search_python = false;
    config.producer = Producer {
        name: "gpumeter-inject".to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
    };
    if let Some(v) = env_nonempty("GPUMETER_BUFFER_SIZE") {
        match v.trim().parse::<usize>() {
            Ok(n) => config.buffer_size = n,
            Err(_) => say(&format!(
                "GPUMETER_BUFFER_SIZE={v} is not a number of bytes; using the default"
            )),
        }
    }
    if let Some(v) = env_nonempty("GPUMETER_INSTRUCTIONS") {
        match v.trim() {
            "1" | "true" | "yes" => config.instructions = true,
            "0" | "false" | "no" => {}
            _ => say(&format!(
                "GPUMETER_INSTRUCTIONS={v} is not 1 or 0; instrumented mode stays off"
            )),
        }
    }
    if let Some(v) = env_nonempty("GPUMETER_FLUSH_PERIOD_MS") {
        match v.trim().parse::<u32>() {
            Ok(n) => config.flush_period_ms = n,
            Err(_) => say(&format!(
                "GPUMETER_FLUSH_PERIOD_MS={v} is not a number of ms; not set"
            )),
        }
    }
    if let Some(v) = env_nonempty("GPUMETER_ENERGY") {
        match v.trim() {
            "0" | "false" | "no" | "off" => config.energy = false,
            "1" | "true" | "yes" | "on" => config.energy = true,
            _ => say(&format!(
                "GPUMETER_ENERGY={v} is not 1 or 0; energy stays recorded"
            )),
        }
    }
    if let Some(v) = env_nonempty("GPUMETER_ENERGY_INTERVAL_MS") {
        match v.trim().parse::<u64>().map(Duration::from_millis) {
            Ok(d) if ENERGY_INTERVAL_RANGE.contains(&d) => config.energy_interval = d,
            _ => say(&format!(
                "GPUMETER_ENERGY_INTERVAL_MS={v} is not a number of ms from 10 to 3600000; using \
                 the default"
            )),
        }
    }
    config.pm_sampling = pm_sampling_from_env(
        env_nonempty("GPUMETER_PM_SAMPLING").as_deref(),
        env_nonempty("GPUMETER_PM_INTERVAL_NS").as_deref(),
        &mut |m| say(m),
    );
    config.flops = flops_from_env(env_nonempty("GPUMETER_FLOPS").as_deref(), &mut |m| say(m));
    config.labels = gpumeter_collector::labels::process_labels();
    config
}

/// FLOP counters from `GPUMETER_FLOPS` (`on`): `None` unless it says 1; another value is
/// reported through `say`.
fn flops_from_env(on: Option<&str>, say: &mut dyn FnMut(&str)) -> Option<FlopsConfig> {
    match on.map(str::trim) {
        None | Some("0" | "false" | "no" | "off") => None,
        Some("1" | "true" | "yes" | "on") => Some(FlopsConfig::default()),
        Some(v) => {
            say(&format!(
                "GPUMETER_FLOPS={v} is not 1 or 0; FLOP counting stays off"
            ));
            None
        }
    }
}

/// PM sampling from `GPUMETER_PM_SAMPLING` (`on`) and `GPUMETER_PM_INTERVAL_NS` (`interval`):
/// `None` unless `on` says 1; an interval that is not a number of ns within
/// [`PM_INTERVAL_RANGE`] is reported through `say` and the default used.
fn pm_sampling_from_env(
    on: Option<&str>,
    interval: Option<&str>,
    say: &mut dyn FnMut(&str),
) -> Option<PmSamplingConfig> {
    match on.map(str::trim) {
        None | Some("0" | "false" | "no" | "off") => return None,
        Some("1" | "true" | "yes" | "on") => {}
        Some(v) => {
            say(&format!(
                "GPUMETER_PM_SAMPLING={v} is not 1 or 0; PM sampling stays off"
            ));
            return None;
        }
    }
    let mut pm = PmSamplingConfig::default();
    if let Some(v) = interval {
        match v.trim().parse::<u64>().map(Duration::from_nanos) {
            Ok(d) if PM_INTERVAL_RANGE.contains(&d) => pm.interval = d,
            _ => say(&format!(
                "GPUMETER_PM_INTERVAL_NS={v} is not a number of ns from {} to {}; using {} ns",
                PM_INTERVAL_RANGE.start().as_nanos(),
                PM_INTERVAL_RANGE.end().as_nanos(),
                pm.interval.as_nanos()
            )),
        }
    }
    Some(pm)
}

fn initialize() -> Result<(), String> {
    if INITIALIZED.swap(true, Ordering::SeqCst) {
        return Ok(());
    }
    let verbose = env_nonempty("GPUMETER_VERBOSE").is_some_and(|v| v != "0");
    let pid = std::process::id();
    let template = env_nonempty("GPUMETER_OUT").unwrap_or_else(|| DEFAULT_OUT.to_string());
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let wanted = PathBuf::from(expand_template(&template, pid, &host_name(), secs));
    let (file, path) = create_output(&wanted, pid)
        .map_err(|e| format!("cannot create the recording {}: {e}", wanted.display()))?;
    let sink = GmrFileSink::from_file(file, &path);
    let collector = match Collector::start(config_from_env(), Box::new(sink)) {
        Ok(c) => c,
        Err(e) => {
            // The file is ours and holds at most a header: nothing was recorded.
            let _ = std::fs::remove_file(&path);
            return Err(e.to_string());
        }
    };
    if verbose {
        say(&format!(
            "metering process {pid} into {} ({}, {})",
            path.display(),
            collector.library_path().display(),
            collector.api_version()
        ));
        for w in collector.warnings() {
            say(&format!("warning: {w}"));
        }
    }
    *state() = Some(Running {
        collector,
        path,
        pid,
        verbose,
    });
    // SAFETY: `at_exit` is an `extern "C" fn()` that catches every panic; it stays valid until
    // the process exits (the driver never unloads an injection library).
    if unsafe { libc::atexit(at_exit) } != 0 {
        if let Some(run) = state().take() {
            let report = run.collector.stop();
            report_stop(&run.path, &report, run.verbose);
        }
        return Err("cannot register the exit handler; stopped at once".to_string());
    }
    Ok(())
}

/// Stops the collector and finishes the recording when the process exits.
extern "C" fn at_exit() {
    let _ = catch_unwind(|| {
        let Some(run) = state().take() else {
            return;
        };
        if run.pid != std::process::id() {
            // A forked child inherited the parent's state: the collector and the file belong
            // to the parent. Leave both alone (dropping would stop the parent's collection).
            std::mem::forget(run);
            return;
        }
        let report = run.collector.stop();
        report_stop(&run.path, &report, run.verbose);
    });
}

/// Says what a stop produced: problems always, a summary when verbose.
fn report_stop(path: &Path, r: &StopReport, verbose: bool) {
    if verbose {
        say(&format!(
            "wrote {}: {} activity buffers, {} records, {} kernel records, {} energy samples",
            path.display(),
            r.buffers,
            r.records,
            r.kernels,
            r.energy_samples
        ));
        for (device, what) in &r.pm_devices {
            say(&format!("PM sampling device {device}: {what}"));
        }
        if r.pm_frames > 0 || !r.pm_devices.is_empty() {
            say(&format!(
                "PM sampling: {} samples in {} frames",
                r.pm_samples, r.pm_frames
            ));
        }
        if r.header.instrumented {
            say(&format!(
                "instrumented mode: {} instruction-count frames",
                r.instruction_frames
            ));
        }
    }
    let flops = r.flops_frames > 0 || !r.flops_contexts.is_empty();
    if flops {
        // Always said: the replay cost is the price of the counters.
        for (device, what) in &r.flops_contexts {
            say(&format!("FLOP counters device {device}: {what}"));
        }
        say(&format!(
            "FLOP counters: {} kernel launches in {} frames, {} without counters, {} unusable \
             values (range profiler, kernel replay: kernels serialized and replayed once per \
             pass)",
            r.flops_launches,
            r.flops_frames,
            r.flops_launches_without_counts,
            r.flops_unusable_values
        ));
    }
    if verbose || r.header.instrumented || flops || r.pm_overflows > 0 || r.pm_unusable_values > 0 {
        for w in &r.warnings {
            say(&format!("warning: {w}"));
        }
    }
    if !r.is_complete() {
        say(&format!(
            "the recording {} misses work: {} records dropped by CUPTI, {} buffers failed, {} \
             discarded, {} unknown, {} PM sampling overflows, {} PM samples unwritten, {} kernel \
             launches without FLOP counters; a usage report books dropped records and overflows \
             as loss, and FLOP meters are not meterable on a device with launches without \
             counters",
            path.display(),
            r.dropped_records,
            r.failed_buffers,
            r.discarded_buffers,
            r.unknown_buffers,
            r.pm_overflows,
            r.pm_unwritten_samples,
            r.flops_launches_without_counts
        ));
        for p in &r.panics {
            say(&format!("caught {p}"));
        }
        for e in &r.errors {
            say(&format!("error: {e}"));
        }
    }
}

/// `CUSTOM0..2` for 0..2.
fn external_kind(kind: u32) -> Option<ExternalKind> {
    match kind {
        0 => Some(ExternalKind::Custom0),
        1 => Some(ExternalKind::Custom1),
        2 => Some(ExternalKind::Custom2),
        _ => None,
    }
}

/// Status: success.
pub const GPUMETER_INJECT_OK: c_int = 0;
/// Status: no collector runs in this process (the injection did not start, or has stopped).
pub const GPUMETER_INJECT_NOT_RUNNING: c_int = -1;
/// Status: an argument is invalid (a kind other than 0..2, a NULL or non-UTF-8 string).
pub const GPUMETER_INJECT_INVALID: c_int = -2;
/// Status: CUPTI refused the call (e.g. a pop with nothing pushed).
pub const GPUMETER_INJECT_CUPTI_ERROR: c_int = -3;
/// Status: a panic was caught (a bug in gpumeter).
pub const GPUMETER_INJECT_PANIC: c_int = -4;

fn guarded(f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(GPUMETER_INJECT_PANIC)
}

/// Pushes external correlation id `id` of kind `kind` (0, 1, 2 = CUPTI's CUSTOM0..2) for the
/// calling thread: its CUDA work until the matching pop is tied to `id` in the recording
/// (EXTERNAL_CORRELATION records), which a tenant map's `[external]` table attributes.
///
/// Returns [`GPUMETER_INJECT_OK`], [`GPUMETER_INJECT_NOT_RUNNING`],
/// [`GPUMETER_INJECT_INVALID`] (bad kind), [`GPUMETER_INJECT_CUPTI_ERROR`] or
/// [`GPUMETER_INJECT_PANIC`].
#[no_mangle]
pub extern "C" fn gpumeter_inject_push_external_id(kind: u32, id: u64) -> c_int {
    guarded(|| {
        let Some(kind) = external_kind(kind) else {
            return GPUMETER_INJECT_INVALID;
        };
        match state().as_ref() {
            None => GPUMETER_INJECT_NOT_RUNNING,
            Some(run) => match run.collector.push_external_id(kind, id) {
                Ok(()) => GPUMETER_INJECT_OK,
                Err(_) => GPUMETER_INJECT_CUPTI_ERROR,
            },
        }
    })
}

/// Pops the calling thread's innermost external correlation id of `kind` (0..2); writes it
/// to `last_id` when that is not NULL (only on success).
///
/// Returns the statuses of [`gpumeter_inject_push_external_id`].
///
/// # Safety
/// `last_id` is NULL or valid for writing a `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn gpumeter_inject_pop_external_id(kind: u32, last_id: *mut u64) -> c_int {
    guarded(|| {
        let Some(kind) = external_kind(kind) else {
            return GPUMETER_INJECT_INVALID;
        };
        let popped = match state().as_ref() {
            None => return GPUMETER_INJECT_NOT_RUNNING,
            Some(run) => run.collector.pop_external_id(kind),
        };
        match popped {
            Ok(id) => {
                if !last_id.is_null() {
                    // SAFETY: not NULL, and valid for a write by the caller's contract.
                    unsafe { *last_id = id };
                }
                GPUMETER_INJECT_OK
            }
            Err(_) => GPUMETER_INJECT_CUPTI_ERROR,
        }
    })
}

/// Records in the recording that external id `external_id` (0: none) belongs to `tenant`
/// (a NUL-terminated UTF-8 string), with this process's id. Informational: the tenant map
/// decides attribution.
///
/// Returns [`GPUMETER_INJECT_OK`], [`GPUMETER_INJECT_NOT_RUNNING`],
/// [`GPUMETER_INJECT_INVALID`] (NULL or non-UTF-8 `tenant`) or [`GPUMETER_INJECT_PANIC`].
///
/// # Safety
/// `tenant` is NULL or points to a NUL-terminated string that stays valid during the call.
#[no_mangle]
pub unsafe extern "C" fn gpumeter_inject_tenant_hint(
    external_id: u64,
    tenant: *const c_char,
) -> c_int {
    guarded(|| {
        if tenant.is_null() {
            return GPUMETER_INJECT_INVALID;
        }
        // SAFETY: not NULL, NUL-terminated and live by the caller's contract.
        let Ok(tenant) = unsafe { CStr::from_ptr(tenant) }.to_str() else {
            return GPUMETER_INJECT_INVALID;
        };
        match state().as_ref() {
            None => GPUMETER_INJECT_NOT_RUNNING,
            Some(run) => {
                run.collector
                    .tenant_hint(external_id, std::process::id(), tenant);
                GPUMETER_INJECT_OK
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_expand() {
        let cases = [
            ("/var/lib/gm/%h-%p.gmr", "/var/lib/gm/node7-42.gmr"),
            ("run-%t.gmr", "run-1700000000.gmr"),
            ("100%%-%x-%", "100%-%x-%"),
            ("plain.gmr", "plain.gmr"),
        ];
        for (t, want) in cases {
            assert_eq!(expand_template(t, 42, "node7", 1_700_000_000), want);
        }
    }

    #[test]
    fn second_files_take_the_pid() {
        assert_eq!(
            with_pid(Path::new("/tmp/run.gmr"), 7),
            PathBuf::from("/tmp/run.7.gmr")
        );
        assert_eq!(with_pid(Path::new("run"), 7), PathBuf::from("run.7"));
    }

    #[test]
    fn outputs_never_clobber() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("sub/run.gmr");
        let (_f, first) = create_output(&p, 11).expect("first");
        assert_eq!(first, p);
        let (_g, second) = create_output(&p, 12).expect("second");
        assert_eq!(second, dir.path().join("sub/run.12.gmr"));
        // The same name and pid again (a restarted container): a third file, the second kept.
        std::fs::write(&second, b"the second recording").expect("write");
        let (_h, third) = create_output(&p, 12).expect("third");
        assert_eq!(third, dir.path().join("sub/run.12.1.gmr"));
        let (_i, fourth) = create_output(&p, 12).expect("fourth");
        assert_eq!(fourth, dir.path().join("sub/run.12.2.gmr"));
        assert_eq!(
            std::fs::read(&second).expect("read"),
            b"the second recording",
            "never truncated"
        );
        let bare = dir.path().join("bare");
        let names: Vec<PathBuf> = (0..3)
            .map(|_| create_output(&bare, 5).expect("bare").1)
            .collect();
        assert_eq!(
            names,
            ["bare", "bare.5", "bare.5.1"].map(|n| dir.path().join(n))
        );
    }

    #[test]
    fn flops_is_read_from_the_environment() {
        let said = std::cell::RefCell::new(Vec::<String>::new());
        let mut say = |m: &str| said.borrow_mut().push(m.to_string());
        assert_eq!(flops_from_env(None, &mut say), None);
        assert_eq!(flops_from_env(Some("0"), &mut say), None);
        assert_eq!(
            flops_from_env(Some(" 1 "), &mut say),
            Some(FlopsConfig::default())
        );
        assert_eq!(flops_from_env(Some("maybe"), &mut say), None);
        assert_eq!(said.borrow().len(), 1);
        assert!(said.borrow()[0].contains("GPUMETER_FLOPS=maybe"));
    }

    #[test]
    fn pm_sampling_is_read_from_the_environment() {
        let said = std::cell::RefCell::new(Vec::<String>::new());
        let mut say = |m: &str| said.borrow_mut().push(m.to_string());
        assert_eq!(pm_sampling_from_env(None, Some("5000"), &mut say), None);
        assert_eq!(pm_sampling_from_env(Some("0"), None, &mut say), None);
        assert!(said.borrow().is_empty());
        assert_eq!(pm_sampling_from_env(Some("maybe"), None, &mut say), None);
        assert_eq!(said.borrow().len(), 1, "{said:?}");
        assert!(said.borrow()[0].contains("GPUMETER_PM_SAMPLING=maybe"));
        let pm = pm_sampling_from_env(Some("1"), None, &mut say).expect("on");
        assert_eq!(pm, PmSamplingConfig::default());
        let pm = pm_sampling_from_env(Some("1"), Some(" 20000 "), &mut say).expect("on");
        assert_eq!(pm.interval, Duration::from_micros(20));
        // The range's edges are taken; outside it, the default with a message.
        for (v, ns) in [("1000", 1_000), ("1000000000", 1_000_000_000)] {
            let pm = pm_sampling_from_env(Some("on"), Some(v), &mut say).expect("on");
            assert_eq!(pm.interval, Duration::from_nanos(ns));
        }
        let before = said.borrow().len();
        for v in ["999", "2000000000", "1ms", "-5"] {
            let pm = pm_sampling_from_env(Some("yes"), Some(v), &mut say).expect("on");
            assert_eq!(pm.interval, PmSamplingConfig::default().interval, "{v}");
        }
        assert_eq!(said.borrow().len(), before + 4);
        assert!(said
            .borrow()
            .last()
            .is_some_and(|m| m.contains("GPUMETER_PM_INTERVAL_NS=-5")));
    }

    #[test]
    fn helpers_without_a_collector() {
        assert_eq!(
            gpumeter_inject_push_external_id(0, 1),
            GPUMETER_INJECT_NOT_RUNNING
        );
        assert_eq!(
            gpumeter_inject_push_external_id(7, 1),
            GPUMETER_INJECT_INVALID
        );
        // SAFETY: NULL is allowed for both pointers.
        unsafe {
            assert_eq!(
                gpumeter_inject_pop_external_id(1, std::ptr::null_mut()),
                GPUMETER_INJECT_NOT_RUNNING
            );
            assert_eq!(
                gpumeter_inject_tenant_hint(1, std::ptr::null()),
                GPUMETER_INJECT_INVALID
            );
        }
    }
}
