//! `gpumeter record` (run a command under the CUDA injection library) and
//! `gpumeter recording show` (what a `.gmr` holds).
//!
//! Exit codes of `record`: the command's own (128 + N when signal N ended it); when the
//! command could not be run at all: 127 (not found), 126 (not executable), 125 (anything else
//! that kept `record` from running it: no injection library, an unusable `--out`), like
//! `env` and `timeout`.

mod inspect;
mod launch;
mod show;

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::Failure;

pub(crate) use launch::run;

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

/// `gpumeter recording …`.
pub(crate) fn recording(command: RecordingCommand) -> Result<String, Failure> {
    match command {
        RecordingCommand::Show { file, json } => {
            let i = inspect::inspect(&file).map_err(|e| fail(1, e))?;
            if json {
                crate::json::to_json(&i)
            } else {
                Ok(crate::text_out(&show::show_text(&i)))
            }
        }
    }
}
