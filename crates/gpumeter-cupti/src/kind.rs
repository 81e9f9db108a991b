//! CUPTI activity kinds (`CUpti_ActivityKind`, `cupti_activity.h`): the 4-byte tag every
//! activity record starts with.

use std::fmt;

/// A `CUpti_ActivityKind` value as read from a buffer (little-endian `u32` at the start of a
/// record). Any value can be held; [`ActivityKind::name`] knows the kinds of CUPTI 13.4, a
/// superset of 12.8's and 13.0's. Whether a kind is valid *for a buffer* depends on the producer's API
/// version ([`crate::ApiVersion`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActivityKind(pub u32);

/// `CUPTI_ACTIVITY_KIND_*` names without the prefix, indexed by value (CUPTI 13.4 header,
/// values 0..=59; 12.8 ends at 54, 13.0 at 55).
const NAMES: [&str; 60] = [
    "INVALID",
    "MEMCPY",
    "MEMSET",
    "KERNEL",
    "DRIVER",
    "RUNTIME",
    "EVENT",
    "METRIC",
    "DEVICE",
    "CONTEXT",
    "CONCURRENT_KERNEL",
    "NAME",
    "MARKER",
    "MARKER_DATA",
    "SOURCE_LOCATOR",
    "GLOBAL_ACCESS",
    "BRANCH",
    "OVERHEAD",
    "CDP_KERNEL",
    "PREEMPTION",
    "ENVIRONMENT",
    "EVENT_INSTANCE",
    "MEMCPY2",
    "METRIC_INSTANCE",
    "INSTRUCTION_EXECUTION",
    "UNIFIED_MEMORY_COUNTER",
    "FUNCTION",
    "MODULE",
    "DEVICE_ATTRIBUTE",
    "SHARED_ACCESS",
    "PC_SAMPLING",
    "PC_SAMPLING_RECORD_INFO",
    "INSTRUCTION_CORRELATION",
    "OPENACC_DATA",
    "OPENACC_LAUNCH",
    "OPENACC_OTHER",
    "CUDA_EVENT",
    "STREAM",
    "SYNCHRONIZATION",
    "EXTERNAL_CORRELATION",
    "NVLINK",
    "INSTANTANEOUS_EVENT",
    "INSTANTANEOUS_EVENT_INSTANCE",
    "INSTANTANEOUS_METRIC",
    "INSTANTANEOUS_METRIC_INSTANCE",
    "MEMORY",
    "PCIE",
    "OPENMP",
    "INTERNAL_LAUNCH_API",
    "MEMORY2",
    "MEMORY_POOL",
    "GRAPH_TRACE",
    "JIT",
    "DEVICE_GRAPH_TRACE",
    "MEM_DECOMPRESS",
    "CONFIDENTIAL_COMPUTE_ROTATION",
    "GRAPH_HOST_NODE",
    "COMPUTE_ENGINE_CTX_SWITCH",
    "HOST_LAUNCH",
    "GREEN_CONTEXT",
];

/// The same names in lower case: the categories under which records that are not work are
/// counted as skipped in a usage report (`records.skipped`, e.g. `overhead`, `marker`).
const CATEGORIES: [&str; 60] = [
    "invalid",
    "memcpy",
    "memset",
    "kernel",
    "driver",
    "runtime",
    "event",
    "metric",
    "device",
    "context",
    "concurrent_kernel",
    "name",
    "marker",
    "marker_data",
    "source_locator",
    "global_access",
    "branch",
    "overhead",
    "cdp_kernel",
    "preemption",
    "environment",
    "event_instance",
    "memcpy2",
    "metric_instance",
    "instruction_execution",
    "unified_memory_counter",
    "function",
    "module",
    "device_attribute",
    "shared_access",
    "pc_sampling",
    "pc_sampling_record_info",
    "instruction_correlation",
    "openacc_data",
    "openacc_launch",
    "openacc_other",
    "cuda_event",
    "stream",
    "synchronization",
    "external_correlation",
    "nvlink",
    "instantaneous_event",
    "instantaneous_event_instance",
    "instantaneous_metric",
    "instantaneous_metric_instance",
    "memory",
    "pcie",
    "openmp",
    "internal_launch_api",
    "memory2",
    "memory_pool",
    "graph_trace",
    "jit",
    "device_graph_trace",
    "mem_decompress",
    "confidential_compute_rotation",
    "graph_host_node",
    "compute_engine_ctx_switch",
    "host_launch",
    "green_context",
];

impl ActivityKind {
    /// `CUPTI_ACTIVITY_KIND_INVALID` (0): never a valid record.
    pub const INVALID: Self = Self(0);
    /// `CUPTI_ACTIVITY_KIND_MEMCPY` (1): a host/device memory copy.
    pub const MEMCPY: Self = Self(1);
    /// `CUPTI_ACTIVITY_KIND_MEMSET` (2).
    pub const MEMSET: Self = Self(2);
    /// `CUPTI_ACTIVITY_KIND_KERNEL` (3): serialized kernel execution.
    pub const KERNEL: Self = Self(3);
    /// `CUPTI_ACTIVITY_KIND_DRIVER` (4): a CUDA driver API call (`CUpti_ActivityAPI`).
    pub const DRIVER: Self = Self(4);
    /// `CUPTI_ACTIVITY_KIND_RUNTIME` (5): a CUDA runtime API call (`CUpti_ActivityAPI`).
    pub const RUNTIME: Self = Self(5);
    /// `CUPTI_ACTIVITY_KIND_DEVICE` (8): a device's properties.
    pub const DEVICE: Self = Self(8);
    /// `CUPTI_ACTIVITY_KIND_CONTEXT` (9): a CUDA context.
    pub const CONTEXT: Self = Self(9);
    /// `CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL` (10): a kernel execution.
    pub const CONCURRENT_KERNEL: Self = Self(10);
    /// `CUPTI_ACTIVITY_KIND_MARKER` (12): an NVTX marker.
    pub const MARKER: Self = Self(12);
    /// `CUPTI_ACTIVITY_KIND_OVERHEAD` (17): overhead added by CUPTI or the driver.
    pub const OVERHEAD: Self = Self(17);
    /// `CUPTI_ACTIVITY_KIND_MEMCPY2` (22): a peer-to-peer memory copy.
    pub const MEMCPY2: Self = Self(22);
    /// `CUPTI_ACTIVITY_KIND_INSTRUCTION_EXECUTION` (24): per-instruction execution counts.
    pub const INSTRUCTION_EXECUTION: Self = Self(24);
    /// `CUPTI_ACTIVITY_KIND_SYNCHRONIZATION` (38).
    pub const SYNCHRONIZATION: Self = Self(38);
    /// `CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION` (39): an external id for a correlation id.
    pub const EXTERNAL_CORRELATION: Self = Self(39);
    /// `CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API` (48): a driver launch outside any public API
    /// call (`CUpti_ActivityAPI`).
    pub const INTERNAL_LAUNCH_API: Self = Self(48);
    /// `CUPTI_ACTIVITY_KIND_MEMORY2` (49): a memory allocation or release.
    pub const MEMORY2: Self = Self(49);
    /// `CUPTI_ACTIVITY_KIND_GRAPH_TRACE` (51): one CUDA graph launch.
    pub const GRAPH_TRACE: Self = Self(51);
    /// `CUPTI_ACTIVITY_KIND_JIT` (52).
    pub const JIT: Self = Self(52);
    /// `CUPTI_ACTIVITY_KIND_GREEN_CONTEXT` (59, CUPTI 13.4 only: not in 12.8 or 13.0).
    pub const GREEN_CONTEXT: Self = Self(59);

    /// The kind's name without the `CUPTI_ACTIVITY_KIND_` prefix (`CONCURRENT_KERNEL`), or
    /// `None` for a value no CUPTI release this crate knows defines.
    pub fn name(self) -> Option<&'static str> {
        NAMES.get(self.0 as usize).copied()
    }

    /// The lower-case name (`concurrent_kernel`), used as the skipped-record category in usage
    /// reports; `None` for an unknown value.
    pub fn category(self) -> Option<&'static str> {
        CATEGORIES.get(self.0 as usize).copied()
    }
}

impl fmt::Debug for ActivityKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for ActivityKind {
    /// `CONCURRENT_KERNEL (10)`, or `unknown kind 77`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n} ({})", self.0),
            None => write!(f, "unknown kind {}", self.0),
        }
    }
}
