//! `gpumeter record` (run a command under the CUDA injection library) and
//! `gpumeter recording show` (what a `.gmr` holds).
//!
//! Exit codes of `record`: the command's own (128 + N when signal N ended it); when the
//! command could not be run at all: 127 (not found), 126 (not executable), 125 (anything else
//! that kept `record` from running it: no injection library, an unusable `--out`), like
//! `env` and `timeout`.
// `signal(2)`: `record` ignores SIGINT and SIGQUIT while it waits (the terminal sends them to
// the command too), as `system(3)` does, so it can still finish the recording's summary.
#![allow(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use clap::{Args, Subcommand};
use gpumeter::cupti::gmr::{
    read_gmr, ClockPair, EnergySample, Frame, GmrFile, GmrHeader, GmrWriter, LocatedFrame, Producer,
};
use gpumeter::cupti::{decode, ApiVersion, Record, StringTable};
use serde::Serialize;

use crate::table::{esc, group, Table};
use crate::{say, Failure};
use gpumeter::core::time::rfc3339_ns;

/// The environment variable naming the injection library for `record`.
pub(crate) const ENV_INJECT_LIB: &str = "GPUMETER_INJECT_LIB";
/// The injection library's file name.
pub(crate) const INJECT_LIB_NAME: &str = "libgpumeter_inject.so";

/// `gpumeter record` arguments.
#[derive(Debug, Args)]
pub(crate) struct RecordArgs {
    /// Where to write the recording (.gmr); an existing file is replaced (never the injection
    /// library or the command's program: exit 2), through a symbolic link. Not `-`: standard
    /// output is the command's (exit 2; `./-` is a file so named). The injection library writes it as the
    /// command runs, frame by frame, so that it can be metered while it grows. Other processes
    /// of the command that use CUDA write `<stem>.<pid>.gmr` beside it.
    #[arg(long, value_name = "FILE.gmr")]
    out: PathBuf,
    /// The injection library. Default: $GPUMETER_INJECT_LIB, else libgpumeter_inject.so beside
    /// this executable or in ../lib.
    #[arg(long, value_name = "PATH")]
    inject_lib: Option<PathBuf>,
    /// Instrumented mode: also record the warp-level instructions of every kernel launch
    /// (CUPTI SASS metrics, CUDA 12.4+). Every launch then waits for its kernels and patched
    /// kernels run slower, so time meters of the recording carry an instrumentation warning.
    #[arg(long)]
    instructions: bool,
    /// PM sampling: also sample each GPU's hardware counters of SM activity (and DRAM bytes
    /// where the chip offers them) at GPU-time intervals (CUPTI PM sampling, CUDA 12.6+), for
    /// the sm_active_ns and dram_bytes meters. Needs GPU performance-counter permission: root,
    /// or the driver option NVreg_RestrictProfilingToAdminUsers=0.
    #[arg(long)]
    pm_sampling: bool,
    /// Time between PM samples, e.g. 100us, 1ms, from 1us to 1s (default 100us). Needs
    /// --pm-sampling.
    #[arg(
        long,
        value_name = "DURATION",
        requires = "pm_sampling",
        value_parser = parse_pm_interval
    )]
    pm_interval: Option<std::time::Duration>,
    /// FLOP counters: also record, per kernel launch, CUPTI's SASS op counters (fp64, fp32,
    /// fp16 add/mul/fma) and the GPU's tensor-path operation counters with CUPTI's range
    /// profiler (CUDA 12.6+), for the flops_fp64, flops_fp32, flops_fp16 and tensor_ops
    /// meters. Kernel replay: kernels are serialized and each runs once per counter pass (1
    /// to 10 passes, said at exit), so time meters of the recording carry an instrumentation
    /// warning. Needs GPU performance-counter permission, as --pm-sampling.
    #[arg(long)]
    flops: bool,
    /// The command to run, and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    command: Vec<OsString>,
}

/// `gpumeter recording` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum RecordingCommand {
    /// Show a recording's header, frames, record kinds and kernel names with launch counts.
    Show {
        /// The recording (.gmr); `-` reads it from standard input, named <stdin>.
        file: PathBuf,
        /// Write JSON (for scripts; a debugging view whose shape may change, not a gpumeter
        /// document).
        #[arg(long)]
        json: bool,
    },
}

fn fail(code: u8, message: String) -> Failure {
    Failure { code, message }
}

/// Allowed `--pm-interval`, as the collector's `PM_INTERVAL_RANGE` (the injection library
/// checks it again): 1 µs to 1 s.
const PM_INTERVAL_MIN: std::time::Duration = std::time::Duration::from_micros(1);
const PM_INTERVAL_MAX: std::time::Duration = std::time::Duration::from_secs(1);

/// `--pm-interval`: a duration such as `100us` or `1ms` (humantime's syntax), 1 µs to 1 s.
fn parse_pm_interval(s: &str) -> Result<std::time::Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("{s:?} is not a duration such as 100us or 1ms: {e}"))?;
    if !(PM_INTERVAL_MIN..=PM_INTERVAL_MAX).contains(&d) {
        return Err(format!("{s:?} is outside 1us..=1s (PM sampling interval)"));
    }
    Ok(d)
}

/// The injection library: `--inject-lib`, `$GPUMETER_INJECT_LIB`, beside the executable, or
/// in `../lib` from it.
fn find_inject_lib(explicit: Option<PathBuf>) -> Result<PathBuf, Failure> {
    let named = explicit.map(|p| (p, "--inject-lib")).or_else(|| {
        std::env::var_os(ENV_INJECT_LIB)
            .filter(|v| !v.is_empty())
            .map(|v| (PathBuf::from(v), ENV_INJECT_LIB))
    });
    if let Some((p, from)) = named {
        return if p.is_file() {
            std::path::absolute(&p).map_err(|e| fail(125, format!("{}: {e}", p.display())))
        } else {
            Err(fail(
                125,
                format!(
                    "the injection library {} ({from}) does not exist",
                    p.display()
                ),
            ))
        };
    }
    let exe = std::env::current_exe()
        .and_then(|e| e.canonicalize())
        .map_err(|e| fail(125, format!("cannot locate this executable: {e}")))?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let candidates = [
        dir.join(INJECT_LIB_NAME),
        dir.join("../lib").join(INJECT_LIB_NAME),
    ];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| {
            fail(
                125,
                format!(
                    "no injection library: looked for {} and {}; {}, set {ENV_INJECT_LIB} or \
                     pass --inject-lib",
                    candidates[0].display(),
                    candidates[1].display(),
                    build_hint(&exe)
                ),
            )
        })
}

/// How to get the injection library where `exe` looks for it. An executable in a cargo
/// target directory (`<target>/[<triple>/]<profile>/gpumeter`, the target directory marked by
/// its `CACHEDIR.TAG`) gets the cargo command that builds the library beside it: that
/// profile (`--release`, `--profile NAME`, none for `debug`), that target triple, and that
/// target directory when it is not this workspace's `target/`. Any other place gets where to
/// install it.
fn build_hint(exe: &Path) -> String {
    let Some(command) = cargo_build_command(exe) else {
        return format!(
            "install {INJECT_LIB_NAME} beside this executable or in ../lib from it (it is built \
             in a gpumeter source tree by `cargo build --release -p gpumeter-inject`, into \
             target/release/)"
        );
    };
    format!("build it beside this executable with `{command}` in the gpumeter source tree")
}

/// The cargo command that builds the injection library into `exe`'s directory, when `exe` is
/// in a cargo target directory ([`build_hint`]).
fn cargo_build_command(exe: &Path) -> Option<String> {
    let profile_dir = exe.parent()?;
    let profile = profile_dir.file_name()?.to_str()?;
    let is_target = |d: &Path| d.join("CACHEDIR.TAG").is_file();
    let above = profile_dir.parent()?;
    let (target_dir, triple) = if is_target(above) {
        (above, None)
    } else {
        let triple = above.file_name()?.to_str()?;
        let target = above.parent().filter(|d| is_target(d))?;
        (target, Some(triple))
    };
    let mut command = String::new();
    // This workspace's own target directory (where `cargo build` puts it by default).
    let workspace_target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same(target_dir, &workspace_target) {
        command.push_str(&format!(
            "CARGO_TARGET_DIR={} ",
            shell_word(&target_dir.display().to_string())
        ));
    }
    command.push_str("cargo build");
    match profile {
        "debug" => {}
        "release" => command.push_str(" --release"),
        other => command.push_str(&format!(" --profile {other}")),
    }
    if let Some(t) = triple {
        command.push_str(&format!(" --target {t}"));
    }
    command.push_str(" -p gpumeter-inject");
    Some(command)
}

/// `s` as one POSIX shell word, so the command can be pasted: as it is when it holds only
/// characters no shell treats specially, else in single quotes (a `'` written `'\''`).
fn shell_word(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+=:@,%".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Ignores SIGINT and SIGQUIT until dropped (then restores the previous dispositions).
struct IgnoreInterrupts {
    previous: Vec<(libc::c_int, libc::sighandler_t)>,
}

impl IgnoreInterrupts {
    fn new() -> Self {
        let mut previous = Vec::new();
        for sig in [libc::SIGINT, libc::SIGQUIT] {
            // SAFETY: SIG_IGN is a valid disposition for these signals; no handler code runs.
            let old = unsafe { libc::signal(sig, libc::SIG_IGN) };
            if old != libc::SIG_ERR {
                previous.push((sig, old));
            }
        }
        IgnoreInterrupts { previous }
    }
}

impl Drop for IgnoreInterrupts {
    fn drop(&mut self) {
        for &(sig, old) in &self.previous {
            // SAFETY: restores the disposition `signal` returned for this signal.
            unsafe { libc::signal(sig, old) };
        }
    }
}

/// The exit code to pass on: the command's, or 128 + the signal that ended it.
fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        (None, None) => 1,
    }
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is 256 writable bytes; gethostname writes at most that many.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast::<libc::c_char>(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match (rc, buf.get(..end)) {
        (0, Some(b)) => String::from_utf8_lossy(b).into_owned(),
        _ => String::new(),
    }
}

/// The API version an empty recording names: nominal (it has no buffers to lay out), the
/// default of raw CUPTI buffers (12.8's 26), so every gpumeter reads it.
pub(crate) fn empty_recording_api() -> u32 {
    ApiVersion::default().cupti_api_version()
}

/// Writes a valid recording without buffers, for a command that never initialised CUDA.
fn write_empty(path: &Path, pid: u32) -> Result<(), String> {
    let unix_time_ns = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    let header = GmrHeader {
        cupti_api_version: empty_recording_api(),
        host: host_name(),
        clock: ClockPair {
            cupti_timestamp_ns: 0,
            unix_time_ns,
        },
        process_id: pid,
        devices: Vec::new(),
        producer: Producer {
            name: "gpumeter record".to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        },
        instrumented: false,
    };
    // Whole or not at all, as every file gpumeter writes (a temporary file beside it,
    // renamed); never over a recording the command's processes made meanwhile.
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = tempfile::Builder::new()
        .prefix(".gpumeter-record.")
        .suffix(".tmp")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .tempfile_in(dir)
        .map_err(|e| e.to_string())?;
    let file = tmp.as_file().try_clone().map_err(|e| e.to_string())?;
    let w = GmrWriter::new(file, &header).map_err(|e| e.to_string())?;
    let f = w.finish().map_err(|e| e.to_string())?;
    f.sync_all().map_err(|e| e.to_string())?;
    tmp.persist_noclobber(path)
        .map(drop)
        .map_err(|e| e.error.to_string())
}

/// The file `program` runs: itself when it names a path (has a `/`), else the first
/// executable of its name on `PATH`; `None` when there is none (the spawn then says so).
fn program_path(program: &OsString) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let p = Path::new(program);
    if program.as_encoded_bytes().contains(&b'/') {
        return Some(p.to_path_buf());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(p))
        .find(|c| {
            std::fs::metadata(c).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Recordings other processes of the command wrote beside `out` (`<stem>.<pid>.gmr`, modified
/// since `since`), sorted.
fn sibling_recordings(out: &Path, since: SystemTime) -> Vec<PathBuf> {
    let (Some(dir), Some(stem)) = (out.parent(), out.file_stem()) else {
        return Vec::new();
    };
    let stem = stem.to_string_lossy();
    let ext = out
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let middle = name
                .strip_prefix(&format!("{stem}."))
                .and_then(|r| r.strip_suffix(&ext));
            let fresh = e
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t >= since);
            fresh && middle.is_some_and(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

/// `gpumeter record`: runs the command and exits with its code (see the module docs).
pub(crate) fn run(args: RecordArgs) -> Result<String, Failure> {
    let lib = find_inject_lib(args.inject_lib)?;
    // `--out` is replaced before the command runs: never the library or the program.
    let program = args.command.first().and_then(program_path);
    crate::output::Files::new()
        .input("the injection library", Some(&lib))
        .input("the command's program", program.as_deref())
        .output("--out", Some(&args.out))
        .check()?;
    // A symbolic link stays one: the recording is written where it leads.
    let out = std::path::absolute(crate::output::resolve_links(&args.out))
        .map_err(|e| fail(125, format!("--out {}: {e}", args.out.display())))?;
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| fail(125, format!("cannot create {}: {e}", dir.display())))?;
    }
    match std::fs::remove_file(&out) {
        Ok(()) => say(&format!("notice: replacing {}", out.display())),
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(fail(125, format!("cannot replace {}: {e}", out.display()))),
    }
    let Some((program, rest)) = args.command.split_first() else {
        return Err(fail(2, "no command to record".to_string()));
    };
    if let Some(prev) = std::env::var_os("CUDA_INJECTION64_PATH") {
        if prev != lib.as_os_str() {
            say(&format!(
                "notice: replacing CUDA_INJECTION64_PATH={} for the command",
                PathBuf::from(prev).display()
            ));
        }
    }
    let since = SystemTime::now()
        .checked_sub(std::time::Duration::from_secs(1))
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let mut cmd = Command::new(program);
    cmd.args(rest)
        .env("CUDA_INJECTION64_PATH", &lib)
        .env("GPUMETER_OUT", &out);
    if args.instructions {
        cmd.env("GPUMETER_INSTRUCTIONS", "1");
    } else {
        cmd.env_remove("GPUMETER_INSTRUCTIONS");
    }
    cmd.env_remove("GPUMETER_PM_INTERVAL_NS");
    if args.pm_sampling {
        cmd.env("GPUMETER_PM_SAMPLING", "1");
        if let Some(d) = args.pm_interval {
            cmd.env("GPUMETER_PM_INTERVAL_NS", d.as_nanos().to_string());
        }
    } else {
        cmd.env_remove("GPUMETER_PM_SAMPLING");
    }
    if args.flops {
        cmd.env("GPUMETER_FLOPS", "1");
    } else {
        cmd.env_remove("GPUMETER_FLOPS");
    }
    let mut child = cmd.spawn().map_err(|e| {
        let code = match e.kind() {
            ErrorKind::NotFound => 127,
            ErrorKind::PermissionDenied => 126,
            _ => 125,
        };
        fail(
            code,
            format!("cannot run {}: {e}", PathBuf::from(program).display()),
        )
    })?;
    let pid = child.id();
    let status = {
        let _quiet = IgnoreInterrupts::new();
        child.wait()
    }
    .map_err(|e| fail(125, format!("lost the command: {e}")))?;
    let code = exit_code(status);

    if !out.exists() {
        match write_empty(&out, pid) {
            Ok(()) => say(
                "notice: the command made no CUDA call that loaded the injection library (no \
                 GPU work, or the collector could not start: see any gpumeter-inject message \
                 above); wrote an empty recording",
            ),
            Err(e) => say(&format!(
                "error: cannot write an empty recording to {}: {e}",
                out.display()
            )),
        }
    }
    let mut all = vec![out.clone()];
    all.extend(sibling_recordings(&out, since));
    for p in &all {
        say(&format!(
            "recording written to {}{}",
            p.display(),
            describe(p)
        ));
    }
    if all.len() > 1 {
        let names: Vec<String> = all.iter().map(|p| p.display().to_string()).collect();
        say(&format!(
            "notice: {} processes recorded; meter them together: gpumeter usage {}",
            all.len(),
            names.join(" ")
        ));
    }
    if code != 0 {
        say(&format!("notice: the command exited with status {code}"));
    }
    std::process::exit(code)
}

/// `: N buffers, K kernel records, …` for a recording, or the reason it cannot be read.
fn describe(path: &Path) -> String {
    match inspect(path) {
        Ok(i) => {
            let mut s = format!(
                " ({}, {}",
                count(i.buffers, "activity buffer", "activity buffers"),
                count(i.kernels, "kernel record", "kernel records")
            );
            if i.dropped > 0 {
                s.push_str(&format!(
                    ", {} dropped by CUPTI",
                    count(i.dropped, "record", "records")
                ));
            }
            if !i.finished {
                s.push_str(", unfinished: the process ended before closing it");
            }
            if let Some(t) = &i.torn {
                s.push_str(&format!(", {t}"));
            }
            let corrupt = i.damaged.len() - usize::from(i.torn.is_some());
            if corrupt > 0 {
                s.push_str(&format!(
                    ", {}",
                    count(corrupt as u64, "corrupt frame", "corrupt frames")
                ));
            }
            s.push(')');
            s
        }
        Err(e) => format!(" (cannot be read: {e})"),
    }
}

/// A kernel name and how many kernel records carry it.
#[derive(Debug, Serialize)]
struct KernelCount {
    name: String,
    count: u64,
}

/// A device's energy frames in a recording (`gpumeter recording show`): the counter's first
/// and last readings and what it grew by between them.
#[derive(Debug, Serialize, PartialEq, Eq)]
struct EnergyDevice {
    /// CUDA ordinal (the frames' `device`).
    device: u32,
    /// Energy frames of the device.
    samples: u64,
    /// Earliest timestamp, ns on CUPTI's clock.
    first_timestamp_ns: u64,
    /// Latest timestamp, ns on CUPTI's clock.
    last_timestamp_ns: u64,
    /// The counter at the earliest reading, mJ.
    first_mj: u64,
    /// The counter at the latest reading, mJ.
    last_mj: u64,
    /// `last_mj − first_mj` (0 when the counter fell: a driver reload), mJ.
    delta_mj: u64,
    /// Frames (in file order) whose timestamp is not after the previous frame's.
    out_of_order: u64,
    /// Frames (in file order) whose counter is below the previous frame's.
    decreases: u64,
}

/// Energy frames summarised per device, by ordinal.
fn energy_by_device(frames: &[LocatedFrame]) -> Vec<EnergyDevice> {
    let mut by: BTreeMap<u32, Vec<EnergySample>> = BTreeMap::new();
    for f in frames {
        if let Frame::Energy(e) = &f.frame {
            by.entry(e.device_id).or_default().push(*e);
        }
    }
    by.into_iter()
        .filter_map(|(device, samples)| {
            let first = samples.iter().min_by_key(|s| s.timestamp_ns)?;
            let last = samples.iter().max_by_key(|s| s.timestamp_ns)?;
            let steps = || samples.windows(2).filter_map(|w| w.first().zip(w.get(1)));
            Some(EnergyDevice {
                device,
                samples: samples.len() as u64,
                first_timestamp_ns: first.timestamp_ns,
                last_timestamp_ns: last.timestamp_ns,
                first_mj: first.energy_mj,
                last_mj: last.energy_mj,
                delta_mj: last.energy_mj.saturating_sub(first.energy_mj),
                out_of_order: steps()
                    .filter(|(a, b)| b.timestamp_ns <= a.timestamp_ns)
                    .count() as u64,
                decreases: steps().filter(|(a, b)| b.energy_mj < a.energy_mj).count() as u64,
            })
        })
        .collect()
}

/// One counter of a device's PM samples (`gpumeter recording show`): its sum over the samples
/// that carry it.
#[derive(Debug, Default, Serialize, PartialEq, Eq)]
struct PmCounterTotal {
    /// Samples that carry the counter.
    samples: u64,
    /// Σ of the counter over those samples (saturating at 2⁶⁴ − 1), in its unit (cycles or
    /// bytes).
    sum: u64,
}

impl PmCounterTotal {
    fn add(&mut self, v: Option<u64>) {
        if let Some(v) = v {
            self.samples += 1;
            self.sum = self.sum.saturating_add(v);
        }
    }
}

/// A device's PM-sample frames in a recording (`gpumeter recording show`): how many samples,
/// the span they cover, each counter's sum, and how many overflows CUPTI reported.
#[derive(Debug, Serialize, PartialEq, Eq)]
struct PmDevice {
    /// CUDA ordinal (the frames' `device`).
    device: u32,
    /// PM-sample frames of the device.
    frames: u64,
    /// Samples in those frames.
    samples: u64,
    /// Earliest sample start, ns on CUPTI's clock.
    first_start_ns: u64,
    /// Latest sample end, ns on CUPTI's clock.
    last_end_ns: u64,
    /// Σ `sm__cycles_active.sum` (cycles).
    sm_active_cycles: PmCounterTotal,
    /// Σ `sm__cycles_elapsed.max` (cycles).
    sm_elapsed_cycles: PmCounterTotal,
    /// Σ bytes read from device memory.
    dram_read_bytes: PmCounterTotal,
    /// Σ bytes written to device memory.
    dram_write_bytes: PmCounterTotal,
    /// Samples flagged with a hardware-buffer overflow before them (samples were lost).
    overflows: u64,
}

/// PM-sample frames summarised per device, by ordinal (devices without samples included when
/// a frame names them).
fn pm_by_device(frames: &[LocatedFrame]) -> Vec<PmDevice> {
    let mut by: BTreeMap<u32, PmDevice> = BTreeMap::new();
    for f in frames {
        let Frame::PmSamples(p) = &f.frame else {
            continue;
        };
        let d = by.entry(p.device_id).or_insert_with(|| PmDevice {
            device: p.device_id,
            frames: 0,
            samples: 0,
            first_start_ns: u64::MAX,
            last_end_ns: 0,
            sm_active_cycles: PmCounterTotal::default(),
            sm_elapsed_cycles: PmCounterTotal::default(),
            dram_read_bytes: PmCounterTotal::default(),
            dram_write_bytes: PmCounterTotal::default(),
            overflows: 0,
        });
        d.frames += 1;
        for x in &p.samples {
            d.samples += 1;
            d.first_start_ns = d.first_start_ns.min(x.start_ns);
            d.last_end_ns = d.last_end_ns.max(x.end_ns);
            d.sm_active_cycles.add(x.sm_active_cycles);
            d.sm_elapsed_cycles.add(x.sm_elapsed_cycles);
            d.dram_read_bytes.add(x.dram_read_bytes);
            d.dram_write_bytes.add(x.dram_write_bytes);
            d.overflows += u64::from(x.overflow);
        }
    }
    by.into_values()
        .map(|mut d| {
            if d.samples == 0 {
                d.first_start_ns = 0;
            }
            d
        })
        .collect()
}

/// A function's instruction counts over a recording's instruction-count frames.
#[derive(Debug, Serialize, PartialEq, Eq)]
struct FunctionInstructionTotal {
    /// The function's (mangled) name.
    name: String,
    /// Instruction-count frames (launches) that list it.
    launches: u64,
    /// Σ warp instructions over those frames.
    warp_instructions: u64,
    /// The smallest and largest count of one launch (equal when every launch executed the
    /// same instructions, e.g. the same kernel with the same configuration and data sizes).
    min_per_launch: u64,
    max_per_launch: u64,
}

/// Instruction-count frames summed per function, most instructions first.
fn instructions_by_function(frames: &[LocatedFrame]) -> (u64, Vec<FunctionInstructionTotal>) {
    let mut n = 0u64;
    let mut by: BTreeMap<&str, FunctionInstructionTotal> = BTreeMap::new();
    for f in frames {
        if let Frame::Instructions(c) = &f.frame {
            n += 1;
            for func in &c.functions {
                let v = func.warp_instructions;
                let e = by
                    .entry(func.name.as_str())
                    .or_insert_with(|| FunctionInstructionTotal {
                        name: func.name.clone(),
                        launches: 0,
                        warp_instructions: 0,
                        min_per_launch: v,
                        max_per_launch: v,
                    });
                e.launches += 1;
                e.warp_instructions = e.warp_instructions.saturating_add(v);
                e.min_per_launch = e.min_per_launch.min(v);
                e.max_per_launch = e.max_per_launch.max(v);
            }
        }
    }
    let mut out: Vec<FunctionInstructionTotal> = by.into_values().collect();
    out.sort_by(|a, b| {
        b.warp_instructions
            .cmp(&a.warp_instructions)
            .then_with(|| a.name.cmp(&b.name))
    });
    (n, out)
}

/// One range-profiler metric over a recording's operation-counters frames.
#[derive(Debug, Serialize, PartialEq, Eq)]
struct OpMetricTotal {
    /// The metric's name (`smsp__sass_thread_inst_executed_op_ffma_pred_on.sum`).
    metric: String,
    /// Kernel launches it was measured for.
    launches: u64,
    /// Σ its values over those launches (saturating): thread instructions or tensor-path
    /// operations.
    sum: u64,
}

/// Operation-counters frames (type 10): how many, their kernel launches, the pass counts the
/// range profiler needed, and each metric's sum, largest first.
fn op_counters_by_metric(frames: &[LocatedFrame]) -> (u64, u64, Vec<u32>, Vec<OpMetricTotal>) {
    let (mut n, mut launches) = (0u64, 0u64);
    let mut passes = BTreeSet::new();
    let mut by: BTreeMap<&str, OpMetricTotal> = BTreeMap::new();
    for f in frames {
        let Frame::OpCounts(c) = &f.frame else {
            continue;
        };
        n += 1;
        passes.insert(c.passes);
        for k in &c.kernels {
            launches += 1;
            for v in &k.counters {
                let e = by
                    .entry(v.metric.as_str())
                    .or_insert_with(|| OpMetricTotal {
                        metric: v.metric.clone(),
                        launches: 0,
                        sum: 0,
                    });
                e.launches += 1;
                e.sum = e.sum.saturating_add(v.value);
            }
        }
    }
    let mut out: Vec<OpMetricTotal> = by.into_values().collect();
    out.sort_by(|a, b| b.sum.cmp(&a.sum).then_with(|| a.metric.cmp(&b.metric)));
    (n, launches, passes.into_iter().collect(), out)
}

/// What a recording holds (`gpumeter recording show`).
#[derive(Debug, Serialize)]
struct Inspection {
    file: String,
    header: GmrHeader,
    finished: bool,
    torn: Option<String>,
    /// Frames that could not be used (torn or failing their checksum), described.
    damaged: Vec<String>,
    buffers: u64,
    buffer_bytes: u64,
    string_tables: u64,
    dropped_frames: u64,
    dropped: u64,
    attribution_events: u64,
    energy_samples: u64,
    /// Energy frames per device.
    energy: Vec<EnergyDevice>,
    unknown_frames: u64,
    /// PM-sample frames (type 9) and the samples in them.
    pm_frames: u64,
    pm_samples: u64,
    /// PM-sample frames per device.
    pm: Vec<PmDevice>,
    /// Instruction-count frames (instrumented mode): one per kernel-launch call.
    instruction_frames: u64,
    /// Σ warp instructions per function over those frames.
    instructions: Vec<FunctionInstructionTotal>,
    /// Operation-counters frames (type 10, `record --flops`); the keys below are left out
    /// of the JSON when there are none.
    #[serde(skip_serializing_if = "is_zero")]
    op_frames: u64,
    /// Kernel launches those frames measured.
    #[serde(skip_serializing_if = "is_zero")]
    op_launches: u64,
    /// The replay pass counts they record (0: not known).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    op_passes: Vec<u32>,
    /// Σ per metric over those frames.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    op_counters: Vec<OpMetricTotal>,
    /// Records per kind name (`CONCURRENT_KERNEL`), all buffers.
    records: BTreeMap<String, u64>,
    kernels: u64,
    /// Kernel names with counts, most frequent first.
    kernel_names: Vec<KernelCount>,
    /// Kernel records whose name is in no string table written before them.
    unnamed_kernels: u64,
    /// Buffers that do not decode (with the header's API version).
    decode_errors: Vec<String>,
}

fn inspect(path: &Path) -> Result<Inspection, String> {
    // `-` is standard input, named `<stdin>` as `usage` names it.
    let (name, bytes) = if crate::stdin::is_stdin(path) {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut bytes).map_err(|e| {
            format!(
                "{}: cannot read standard input: {e}",
                crate::stdin::STDIN_NAME
            )
        })?;
        (crate::stdin::STDIN_NAME.to_string(), bytes)
    } else {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        (path.display().to_string(), bytes)
    };
    let file: GmrFile = read_gmr(&bytes).map_err(|e| format!("{name}: {e}"))?;
    let api = ApiVersion::from_cupti(file.header.cupti_api_version);
    let (instruction_frames, instructions) = instructions_by_function(&file.frames);
    let (op_frames, op_launches, op_passes, op_counters) = op_counters_by_metric(&file.frames);
    let mut i = Inspection {
        file: name,
        header: file.header.clone(),
        finished: file.finished,
        torn: file.torn.map(|t| t.to_string()),
        damaged: file.damaged.iter().map(|d| d.to_string()).collect(),
        buffers: 0,
        buffer_bytes: 0,
        string_tables: 0,
        dropped_frames: 0,
        dropped: 0,
        attribution_events: 0,
        energy_samples: 0,
        energy: energy_by_device(&file.frames),
        unknown_frames: file.unknown_frames,
        pm_frames: 0,
        pm_samples: 0,
        pm: pm_by_device(&file.frames),
        instruction_frames,
        instructions,
        op_frames,
        op_launches,
        op_passes,
        op_counters,
        records: BTreeMap::new(),
        kernels: 0,
        kernel_names: Vec::new(),
        unnamed_kernels: 0,
        decode_errors: Vec::new(),
    };
    let mut names = StringTable::new();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for f in &file.frames {
        match &f.frame {
            Frame::ActivityBuffer(b) => {
                i.buffers += 1;
                i.buffer_bytes += b.len() as u64;
                let api = match &api {
                    Ok(a) => *a,
                    Err(e) => {
                        if i.decode_errors.is_empty() {
                            i.decode_errors.push(e.to_string());
                        }
                        continue;
                    }
                };
                match decode(b, api) {
                    Ok(d) => {
                        for r in &d.records {
                            let kind = r
                                .kind
                                .name()
                                .map_or_else(|| r.kind.0.to_string(), str::to_string);
                            *i.records.entry(kind).or_insert(0) += 1;
                            if let Record::Kernel(k) = &r.record {
                                i.kernels += 1;
                                match names.get(k.name_ptr) {
                                    Some(n) => *counts.entry(n.to_string()).or_insert(0) += 1,
                                    None => i.unnamed_kernels += 1,
                                }
                            }
                        }
                    }
                    Err(e) => i
                        .decode_errors
                        .push(format!("frame #{} at byte {}: {e}", f.index, f.offset)),
                }
            }
            Frame::StringTable(t) => {
                i.string_tables += 1;
                names.extend_from(t);
            }
            Frame::Dropped(d) => {
                i.dropped_frames += 1;
                i.dropped = i.dropped.saturating_add(d.count);
            }
            Frame::Attribution(_) => i.attribution_events += 1,
            Frame::Energy(_) => i.energy_samples += 1,
            Frame::PmSamples(p) => {
                i.pm_frames += 1;
                i.pm_samples += p.samples.len() as u64;
            }
            _ => {}
        }
    }
    let mut by_count: Vec<KernelCount> = counts
        .into_iter()
        .map(|(name, count)| KernelCount { name, count })
        .collect();
    by_count.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.name.cmp(&b.name)));
    i.kernel_names = by_count;
    Ok(i)
}

/// `n` with thousands separators and the noun in the singular or the plural: `1 string
/// table`, `2,101 kernel records`.
fn count(n: u64, one: &str, many: &str) -> String {
    format!(
        "{} {}",
        group(&n.to_string()),
        if n == 1 { one } else { many }
    )
}

/// A CUPTI timestamp (ns since the Unix epoch, as the meter reads it) as RFC 3339 UTC with
/// nine fractional digits, and the raw ns: `2026-11-29T21:38:52.011846105Z (1795997932011846105
/// ns)`.
/// A zero is a clock that was not read (a recording whose program never started CUPTI), not
/// the Unix epoch: `not read (0 ns)`.
fn clock_time(ns: u64) -> String {
    if ns == 0 {
        return "not read (0 ns)".to_string();
    }
    format!("{} ({ns} ns)", rfc3339_ns(ns))
}

/// A duration in ns as seconds with nine decimals: `0.326414778 s`.
fn seconds(ns: u64) -> String {
    format!("{}.{:09} s", ns / 1_000_000_000, ns % 1_000_000_000)
}

/// The width of the key column of [`show_text`]: the longest key and two spaces.
const KEY_WIDTH: usize = "instructions".len() + 2;

/// `recording show` as text: one `key  value` line per fact, keys in one column; kernel names
/// and per-function instruction counts as right-aligned tables under their line; times as RFC
/// 3339 UTC beside the raw ns; counts with their nouns in the singular or the plural.
fn show_text(i: &Inspection) -> String {
    let h = &i.header;
    let mut o = String::new();
    // Every value can carry input text (file, host, device and kernel names, errors): escaped.
    let mut line = |k: &str, v: String| o.push_str(&format!("{k:<KEY_WIDTH$}{}\n", esc(&v)));
    line("recording", i.file.clone());
    let state = match (&i.torn, i.finished) {
        (Some(t), _) => format!("torn: {t}"),
        (None, true) => "finished".to_string(),
        (None, false) => "unfinished (no end frame: the producer did not close it)".to_string(),
    };
    line("state", state);
    for d in &i.damaged {
        line("damaged", d.clone());
    }
    line(
        "producer",
        format!("{} {}", h.producer.name, h.producer.version),
    );
    let api = ApiVersion::from_cupti(h.cupti_api_version)
        .map(|a| a.to_string())
        .unwrap_or_else(|e| e.to_string());
    line("CUPTI", api);
    line("host", h.host.clone());
    line("process", h.process_id.to_string());
    line(
        "clock",
        format!(
            "CUPTI {}, wall clock {}",
            clock_time(h.clock.cupti_timestamp_ns),
            clock_time(h.clock.unix_time_ns)
        ),
    );
    if h.devices.is_empty() {
        line("devices", "none in the header".to_string());
    }
    for d in &h.devices {
        line(
            "device",
            format!(
                "{}: {}, {}, compute capability {}, {}",
                d.id,
                d.name.as_deref().unwrap_or("(no name)"),
                d.sm_count
                    .map_or_else(|| "? SMs".to_string(), |n| count(n.into(), "SM", "SMs")),
                d.compute_capability.as_deref().unwrap_or("?"),
                d.uuid.as_deref().unwrap_or("(no uuid)"),
            ),
        );
    }
    line(
        "frames",
        format!(
            "{} ({}), {}, {}, {}, {}, {}{} of unknown types",
            count(i.buffers, "activity buffer", "activity buffers"),
            count(i.buffer_bytes, "byte", "bytes"),
            count(i.string_tables, "string table", "string tables"),
            count(
                i.dropped_frames,
                "dropped-count frame",
                "dropped-count frames"
            ),
            count(
                i.attribution_events,
                "attribution event",
                "attribution events"
            ),
            count(i.energy_samples, "energy sample", "energy samples"),
            if i.pm_frames > 0 {
                format!(
                    "{} ({}), ",
                    count(i.pm_frames, "PM-sample frame", "PM-sample frames"),
                    count(i.pm_samples, "sample", "samples")
                )
            } else {
                String::new()
            },
            group(&i.unknown_frames.to_string()),
        ),
    );
    line(
        "dropped",
        if i.dropped == 0 {
            "no records dropped by CUPTI".to_string()
        } else {
            format!("{} dropped by CUPTI", count(i.dropped, "record", "records"))
        },
    );
    if i.energy.is_empty() {
        line("energy", "no energy samples".to_string());
    }
    for e in &i.energy {
        let span = e.last_timestamp_ns.saturating_sub(e.first_timestamp_ns);
        let mut v = format!(
            "device {}: {} over {}, {} to {}; {} mJ (counter {} to {} mJ)",
            e.device,
            count(e.samples, "sample", "samples"),
            seconds(span),
            rfc3339_ns(e.first_timestamp_ns),
            rfc3339_ns(e.last_timestamp_ns),
            group(&e.delta_mj.to_string()),
            group(&e.first_mj.to_string()),
            group(&e.last_mj.to_string()),
        );
        if e.decreases > 0 {
            v.push_str(&format!(
                "; the counter fell {} (a driver reload)",
                count(e.decreases, "time", "times")
            ));
        }
        if e.out_of_order > 0 {
            v.push_str(&format!(
                "; {} out of time order",
                count(e.out_of_order, "sample", "samples")
            ));
        }
        line("energy", v);
    }
    // PM sampling: only for a recording that has PM-sample frames.
    for p in &i.pm {
        let span = p.last_end_ns.saturating_sub(p.first_start_ns);
        let total = |c: &PmCounterTotal, unit: &str| {
            if c.samples == 0 {
                "not sampled".to_string()
            } else if c.samples == p.samples {
                format!("{} {unit}", group(&c.sum.to_string()))
            } else {
                format!(
                    "{} {unit} (in {} of {})",
                    group(&c.sum.to_string()),
                    count(c.samples, "sample", "samples"),
                    group(&p.samples.to_string())
                )
            }
        };
        let mut v = format!(
            "device {}: {} in {}",
            p.device,
            count(p.samples, "sample", "samples"),
            count(p.frames, "frame", "frames"),
        );
        if p.samples > 0 {
            v.push_str(&format!(
                " over {}, {} to {}",
                seconds(span),
                rfc3339_ns(p.first_start_ns),
                rfc3339_ns(p.last_end_ns)
            ));
        }
        v.push_str(&format!(
            "; SM active {}, SM elapsed {}, DRAM read {}, DRAM written {}",
            total(&p.sm_active_cycles, "cycles"),
            total(&p.sm_elapsed_cycles, "cycles"),
            total(&p.dram_read_bytes, "bytes"),
            total(&p.dram_write_bytes, "bytes"),
        ));
        if p.overflows > 0 {
            v.push_str(&format!(
                "; {} after a hardware-buffer overflow (samples lost)",
                count(p.overflows, "sample", "samples")
            ));
        }
        line("pm", v);
    }
    let kinds: Vec<String> = i
        .records
        .iter()
        .map(|(k, n)| format!("{k} {}", group(&n.to_string())))
        .collect();
    line(
        "records",
        if kinds.is_empty() {
            "none".to_string()
        } else {
            kinds.join(", ")
        },
    );
    line(
        "kernels",
        format!(
            "{}, {}, {} without a name",
            count(i.kernels, "kernel record", "kernel records"),
            count(i.kernel_names.len() as u64, "name", "names"),
            group(&i.unnamed_kernels.to_string())
        ),
    );
    let indent = " ".repeat(KEY_WIDTH);
    if !i.kernel_names.is_empty() {
        let rows = i
            .kernel_names
            .iter()
            .map(|k| vec![group(&k.count.to_string()), k.name.clone()]);
        o.push_str(&columns(
            &indent,
            &[("RECORDS", true), ("KERNEL", false)],
            rows,
        ));
    }
    if h.instrumented || i.instruction_frames > 0 {
        o.push_str(&format!(
            "{:<KEY_WIDTH$}{}{}\n",
            "instructions",
            count(
                i.instruction_frames,
                "instruction-count frame",
                "instruction-count frames"
            ),
            if h.instrumented {
                " (instrumented run: kernels serialized and slowed)"
            } else {
                ""
            }
        ));
        let rows = i.instructions.iter().map(|f| {
            vec![
                group(&f.warp_instructions.to_string()),
                group(&f.launches.to_string()),
                f.name.clone(),
            ]
        });
        o.push_str(&columns(
            &indent,
            &[
                ("WARP INSTRUCTIONS", true),
                ("LAUNCHES", true),
                ("FUNCTION", false),
            ],
            rows,
        ));
    }
    if i.op_frames > 0 {
        let passes: Vec<String> = i
            .op_passes
            .iter()
            .map(|p| match p {
                0 => "unknown".to_string(),
                p => p.to_string(),
            })
            .collect();
        o.push_str(&format!(
            "{:<KEY_WIDTH$}{} for {} (range profiler, kernel replay: {} per kernel; kernels \
             serialized and replayed)\n",
            "op counters",
            count(
                i.op_frames,
                "operation-counters frame",
                "operation-counters frames"
            ),
            count(i.op_launches, "kernel launch", "kernel launches"),
            if i.op_passes == [1] {
                "1 pass".to_string()
            } else {
                format!("{} passes", passes.join(" or "))
            }
        ));
        let rows = i.op_counters.iter().map(|m| {
            vec![
                group(&m.sum.to_string()),
                group(&m.launches.to_string()),
                m.metric.clone(),
            ]
        });
        o.push_str(&columns(
            &indent,
            &[("SUM", true), ("LAUNCHES", true), ("METRIC", false)],
            rows,
        ));
    }
    for e in &i.decode_errors {
        o.push_str(&format!("error: {}\n", esc(e)));
    }
    o.trim_end().to_string()
}

/// A table under a `recording show` line: a header, then the rows, columns two spaces apart
/// and right- or left-aligned (`(name, right)`), each line indented; cells escaped.
fn columns(
    indent: &str,
    header: &[(&str, bool)],
    rows: impl Iterator<Item = Vec<String>>,
) -> String {
    let mut t = Table::new(header);
    for r in rows {
        t.row(r);
    }
    t.render(indent)
}

/// `gpumeter recording …`.
pub(crate) fn recording(command: RecordingCommand) -> Result<String, Failure> {
    match command {
        RecordingCommand::Show { file, json } => {
            let i = inspect(&file).map_err(|e| fail(1, e))?;
            if json {
                crate::to_json(&i)
            } else {
                Ok(crate::text_out(&show_text(&i)))
            }
        }
    }
}

/// Whether a count is 0 (a JSON key left out when so).
fn is_zero(n: &u64) -> bool {
    *n == 0
}
