//! CPU-side joins: the CUDA API events (`cuda_runtime`/`cuda_driver`) that tell a kernel's OS
//! process (by `args.correlation`), the launch calls that tell the launch order and the
//! launching processes, and the warnings when they cannot be read or launched work is missing.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};

use gpumeter_core::{Warning, WarningCode};

use super::event::{parse_args, Event};
use super::fault::Fault;
use super::json::raw_str;
use crate::units::{integer_text, micros_text_to_ns};

/// What the CPU-side CUDA API events of a trace tell: correlation id → OS process id, and the
/// launch calls.
#[derive(Default)]
pub(super) struct CpuSide {
    /// Correlation id → the OS `pid` of the API call with that id.
    pub(super) pid_of_correlation: HashMap<u32, u32>,
    /// CPU-side launch events whose correlation id cannot be read (their kernels get no
    /// process id from them).
    pub(super) bad_api_events: u64,
    /// CPU-side kernel and graph launch calls ([`is_launch`]), for the warning when nothing
    /// GPU-side was recorded.
    pub(super) launches: u64,
    /// The OS process ids of those launch calls (the processes a range-only trace's kernels
    /// can be of).
    pub(super) launch_pids: BTreeSet<u32>,
    /// Launch call correlation id → its `ts` (ns relative to the base): the launch order that
    /// ranges are matched to kernels in.
    pub(super) launch_ts: HashMap<u32, i128>,
}

impl CpuSide {
    /// A CPU-side CUDA API event: its correlation id → its OS process id.
    pub(super) fn api(&mut self, f: &Fault<'_>, ev: &Event<'_>) {
        let launch = ev
            .name
            .and_then(|n| raw_str(n).ok())
            .is_some_and(|n| is_launch(&n));
        if launch {
            self.launches += 1;
        }
        let args = match parse_args(f, ev.args) {
            Ok(a) => a,
            Err(_) => {
                self.bad_api_events += 1;
                return;
            }
        };
        let corr = match f.u32_opt("args.correlation", args.correlation) {
            Ok(c) => c,
            Err(_) => {
                self.bad_api_events += 1;
                return;
            }
        };
        let pid = ev
            .pid
            .and_then(|p| integer_text(p.get()).ok())
            .and_then(|p| u32::try_from(p).ok());
        if let (Some(c), Some(p)) = (corr, pid) {
            self.pid_of_correlation.insert(c, p);
        }
        if launch {
            if let Some(p) = pid {
                self.launch_pids.insert(p);
            }
            let ts = ev
                .ts
                .and_then(|t| raw_str(t).ok().or(Some(Cow::Borrowed(t.get()))))
                .and_then(|t| micros_text_to_ns(&t).ok());
            if let (Some(c), Some(ts)) = (corr, ts) {
                self.launch_ts.insert(c, ts);
            }
        }
    }

    /// The OS process id of the API call with correlation id `correlation`.
    pub(super) fn process_of(&self, correlation: Option<u32>) -> Option<u32> {
        correlation.and_then(|k| self.pid_of_correlation.get(&k).copied())
    }

    /// The trace's one launching process, when there is exactly one: a range carries no
    /// correlation id, so its launch is of that process.
    pub(super) fn range_pid(&self) -> Option<u32> {
        match (self.launch_pids.len(), self.launch_pids.first()) {
            (1, Some(&p)) => Some(p),
            _ => None,
        }
    }

    /// The warning of API events whose correlation id cannot be read, for the file `name`.
    pub(super) fn api_warning(&self, name: &str, warnings: &mut Vec<Warning>) {
        if self.bad_api_events > 0 {
            warnings.push(Warning::new(
                WarningCode::UncorrelatedApiEvents,
                format!(
                    "{name}: {} CPU-side CUDA API events have no readable `args.correlation` (or \
             `args`): the kernels they launched get no process id from them, so a tenant map's \
             [pid] rules cannot attribute those kernels",
                    self.bad_api_events
                ),
            ));
        }
    }

    /// The warning of launched work the trace did not record: launch calls with nothing
    /// GPU-side (`gpu_events` false), or more launch calls than `kernels_recorded`.
    pub(super) fn launch_warning(
        &self,
        name: &str,
        gpu_events: bool,
        kernels_recorded: u64,
        warnings: &mut Vec<Warning>,
    ) {
        if self.launches > 0 && !gpu_events {
            warnings.push(Warning::new(
                WarningCode::LaunchesWithoutGpuEvents,
                format!(
                    "{name}: the CPU side launched GPU work {} times (cudaLaunchKernel and kin, \
                 graph launches) but the trace records nothing GPU-side (no kernel, memcpy, \
                 memset or measured profiler-range event): that work is not metered; record \
                 with CUDA activities on (PyTorch: ProfilerActivity.CUDA)",
                    self.launches
                ),
            ));
        } else if self.launches > kernels_recorded {
            // Every launch call makes at least one kernel (a graph launch several): fewer
            // kernels than launches is launched work the trace did not record.
            warnings.push(Warning::new(
                WarningCode::LaunchesWithoutGpuEvents,
                format!(
                    "{name}: the CPU side launched GPU work {} times (cudaLaunchKernel and kin, \
                 graph launches) but the trace records {kernels_recorded} kernels (kernel \
                 events and measured profiler ranges, read or lost): at least {} launched \
                 kernels are not metered (kernel events left out or dropped, or more kernels \
                 than the CUPTI profiler's range limit)",
                    self.launches,
                    self.launches - kernels_recorded
                ),
            ));
        }
    }
}

/// Whether a CPU-side CUDA API call launches GPU work: the runtime's and driver's kernel
/// launches (`cudaLaunchKernel`, `cudaLaunchKernelExC`, `cudaLaunchCooperativeKernel`,
/// `cuLaunchKernel`, `cuLaunchKernelEx`, their `_ptsz` forms, …) and graph launches
/// (`cudaGraphLaunch`, `cuGraphLaunch`); not `cudaLaunchHostFunc` (CPU work).
pub(super) fn is_launch(name: &str) -> bool {
    let name = name.trim();
    let base = name.strip_suffix("_ptsz").unwrap_or(name);
    ((base.starts_with("cudaLaunch") || base.starts_with("cuLaunch")) && !base.contains("HostFunc"))
        || matches!(base, "cudaGraphLaunch" | "cuGraphLaunch")
}
