//! The header and the frames of a `.gmr`, as a writer takes them and a reader returns them.

use super::*;

/// The clock pair of a recording: one CUPTI timestamp (`cuptiGetTimestamp`) and the wall clock
/// read together, so record times can be checked against or mapped to the wall clock.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockPair {
    /// `cuptiGetTimestamp()`, ns.
    pub cupti_timestamp_ns: u64,
    /// The wall clock at the same moment, ns since the Unix epoch.
    pub unix_time_ns: u64,
}

/// One GPU of the producing host, as the producer saw it (NVML or CUDA device properties).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GmrDevice {
    /// CUDA device ordinal (the `deviceId` of CUPTI records).
    pub id: u32,
    /// Marketing name, e.g. `NVIDIA H100 80GB HBM3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// UUID, `GPU-…` (or `MIG-…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Streaming multiprocessors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_count: Option<u32>,
    /// Compute capability, `"MAJOR.MINOR"` (`"9.0"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_capability: Option<String>,
}

/// Who wrote a recording.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Producer {
    /// Program name (`gpumeter-inject`).
    pub name: String,
    /// Its version.
    pub version: String,
}

/// The header frame of a `.gmr` (JSON). Unknown keys are ignored when reading.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GmrHeader {
    /// The producer's `CUPTI_API_VERSION` (`cuptiGetVersion()`): fixes the layout of every
    /// activity buffer in the file.
    pub cupti_api_version: u32,
    /// Host name of the producing machine.
    #[serde(default)]
    pub host: String,
    /// CUPTI and wall clock read together at the start.
    #[serde(default)]
    pub clock: ClockPair,
    /// OS process id of the metered process.
    #[serde(default)]
    pub process_id: u32,
    /// The host's GPUs.
    #[serde(default)]
    pub devices: Vec<GmrDevice>,
    /// The program that wrote the file.
    #[serde(default)]
    pub producer: Producer,
    /// `true` when the producer ran in instrumented mode (SASS metrics: instruction-count
    /// frames): its kernels ran serialized and slowed by patching, so time meters from it
    /// carry the instrumentation warning. Omitted from the JSON when `false`, so
    /// recordings without it (and their digests) are unchanged.
    #[serde(default, skip_serializing_if = "is_false")]
    pub instrumented: bool,
    /// Labels of the metered process, for a tenant rule (the node agent's `tenant = "{KEY}"`):
    /// key → value, both UTF-8. The injection library records the environment variables
    /// `GPUMETER_TENANT`, `POD_NAMESPACE`, `POD_NAME` and `POD_UID` under their own names,
    /// each only when set and non-empty in the process's environment, and `cgroup`: the
    /// process's cgroup path (the path of the `0::` line of `/proc/self/cgroup`, cgroup v2;
    /// else the first line's path), absent when unreadable, and `pid_ns`: the inode number of
    /// its pid namespace (`/proc/self/ns/pid`, decimal; the namespace of `process_id`), absent
    /// when unreadable and in older recordings. Other producers may add other
    /// keys. Omitted from the JSON when empty, so recordings without labels (and their
    /// digests) are unchanged, and older recordings read as having none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Records CUPTI dropped (`cuptiActivityGetNumDroppedRecords`) since the previous frame for the
/// same context and stream: a delta, summed as loss `dropped`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DroppedRecords {
    /// CUDA device ordinal, `None` when the producer did not know it (then the reader looks
    /// the context up in the recording's CONTEXT records).
    pub device_id: Option<u32>,
    /// CUPTI context id.
    pub context_id: u32,
    /// Stream id (0 for context-wide counts).
    pub stream_id: u32,
    /// Records dropped since the last count.
    pub count: u64,
}

/// What an [`AttributionEvent`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttributionKind {
    /// An external correlation id was pushed (`cuptiActivityPushExternalCorrelationId`).
    ExternalPush,
    /// An external correlation id was popped.
    ExternalPop,
    /// A hint from the producer tying a process or external id to a tenant name (`label`).
    /// Informational: a tenant map decides attribution.
    TenantHint,
    /// A kind this version does not know, kept as its number.
    Other(u32),
}

impl AttributionKind {
    pub(super) fn raw(self) -> u32 {
        match self {
            AttributionKind::ExternalPush => 1,
            AttributionKind::ExternalPop => 2,
            AttributionKind::TenantHint => 3,
            AttributionKind::Other(v) => v,
        }
    }

    pub(super) fn from_raw(v: u32) -> Self {
        match v {
            1 => AttributionKind::ExternalPush,
            2 => AttributionKind::ExternalPop,
            3 => AttributionKind::TenantHint,
            o => AttributionKind::Other(o),
        }
    }
}

/// An attribution event recorded by the producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttributionEvent {
    /// What happened.
    pub kind: AttributionKind,
    /// OS process id it concerns (0 when none).
    pub process_id: u32,
    /// External correlation id it concerns (0 when none).
    pub external_id: u64,
    /// When, ns on CUPTI's clock.
    pub timestamp_ns: u64,
    /// Free text (a tenant name for [`AttributionKind::TenantHint`]), UTF-8.
    pub label: String,
}

/// A reading of a device's cumulative energy counter (NVML `nvmlDeviceGetTotalEnergyConsumption`),
/// frame type 6.
///
/// What the live collector writes (gpumeter-collector, `CollectorConfig::energy`): one sample
/// per GPU at start, one per interval (default 1 s) and one at stop after the final flush.
/// `device_id` is the CUDA ordinal of the header's inventory entry the NVML GPU was matched to
/// (by UUID; by NVML index only where that is provably the CUDA ordinal), so it joins the
/// `deviceId` of the CUPTI records and the header's `devices[].id`; an NVML GPU that matches
/// no entry (not visible to the process, or in MIG mode: its counter covers the whole GPU) is
/// not written. `timestamp_ns` is on CUPTI's clock, the clock of the activity records: the
/// collector reads `cuptiGetTimestamp` around the NVML call (the midpoint), or, without it,
/// maps NVML's wall-clock time through the header's clock pair. Per device, timestamps
/// strictly increase; `energy_mj` only falls when the driver was reloaded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EnergySample {
    /// CUDA device ordinal (the `deviceId` of the CUPTI records, the header's `devices[].id`).
    pub device_id: u32,
    /// When it was read, ns on CUPTI's clock (`cuptiGetTimestamp`: ns since the Unix epoch on
    /// Linux), the clock of the activity records.
    pub timestamp_ns: u64,
    /// The counter as read: cumulative energy since the NVIDIA driver was loaded, mJ (not a
    /// delta).
    pub energy_mj: u64,
}

/// Warp-level instructions one function executed in one kernel-launch API call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FunctionInstructions {
    /// The function's (mangled) name, as CUPTI reports it (the name kernel records carry).
    pub name: String,
    /// Warp-level SASS instructions executed (`smsp__sass_inst_executed`, summed over the
    /// function's instructions and the whole GPU).
    pub warp_instructions: u64,
}

/// The instruction counts of one kernel-launch API call (instrumented mode): the functions
/// that ran between the call and the context synchronization after it (a graph launch may run
/// several). Joined to kernel records by correlation id, context and device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct InstructionCounts {
    /// The launch call's CUPTI correlation id (the `correlationId` of its kernel records).
    pub correlation_id: u32,
    /// CUDA device ordinal.
    pub device_id: u32,
    /// CUPTI context id (`contextUid`).
    pub context_id: u32,
    /// Per function, in the order the producer listed them (by name).
    pub functions: Vec<FunctionInstructions>,
}

impl InstructionCounts {
    /// Σ warp instructions over the functions (saturating).
    pub fn total(&self) -> u64 {
        self.functions
            .iter()
            .fold(0u64, |a, f| a.saturating_add(f.warp_instructions))
    }
}

/// A batch of CUPTI PM-sampling samples of one device, frame type 9, in the order the
/// producer decoded them (by start time).
///
/// `device_id` is the CUDA ordinal (the `deviceId` of the CUPTI records, the header's
/// `devices[].id`), as for [`EnergySample`]. Each [`PmSample`](gpumeter_core::PmSample) is an
/// interval `[start_ns, end_ns)` on CUPTI's clock with the counters the chip supplied (`None`
/// when the producer could not evaluate one); `overflow` says CUPTI reported a hardware-buffer
/// overflow before it (samples were overwritten: loss `pm_sample_overflow` when metered).
/// Replay hands the samples to [`gpumeter_core::Meter::push_pm_sample`] at the frame's place
/// among the activity buffers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PmSamples {
    /// CUDA device ordinal.
    pub device_id: u32,
    /// The samples, in the frame's order.
    pub samples: Vec<gpumeter_core::PmSample>,
}

/// One metric's raw value for one kernel launch, as CUPTI's range profiler evaluated it
/// (`cuptiProfilerHostEvaluateToGpuValues`, a `double` holding an integer count).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct OpCounterValue {
    /// The metric's name with its rollup, as CUPTI names it
    /// (`smsp__sass_thread_inst_executed_op_ffma_pred_on.sum`).
    pub metric: String,
    /// Its value: thread instructions (SASS op counters) or tensor-path math operations
    /// (`sm__ops_path_tensor_*`), count.
    pub value: u64,
}

/// The operation counters of one kernel launch: joined to its kernel record by correlation id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct KernelOpCounters {
    /// The launch call's CUPTI correlation id (the `correlationId` of its kernel record).
    pub correlation_id: u32,
    /// The metrics measured for it, in the producer's order. Raw values, so a reader derives
    /// the meters ([`gpumeter_core::OpCounter`]) and may derive them again differently.
    pub counters: Vec<OpCounterValue>,
}

/// A batch of per-kernel operation counters of one CUDA context, frame type 10 (written by
/// `gpumeter record --flops`: CUPTI's range profiler with one auto range per kernel launch and
/// kernel replay). Replay gives each kernel record of a listed correlation id its
/// [`OpCounts`](gpumeter_core::OpCounts) (`flops_fp64`, `flops_fp32`, `flops_fp16`,
/// `tensor_ops`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpCounters {
    /// CUDA device ordinal.
    pub device_id: u32,
    /// CUPTI context id (`contextUid`).
    pub context_id: u32,
    /// Replay passes the range profiler needed to collect the metrics
    /// (`cuptiProfilerHostGetNumOfPasses`): each kernel ran this many times; 0 when not known.
    pub passes: u32,
    /// Per kernel launch, in launch order.
    pub kernels: Vec<KernelOpCounters>,
}

/// One frame after the header.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Frame {
    /// A raw CUPTI activity buffer (`validSize` bytes).
    ActivityBuffer(Vec<u8>),
    /// Pointer values → strings.
    StringTable(StringTable),
    /// A dropped-records delta.
    Dropped(DroppedRecords),
    /// An attribution event.
    Attribution(AttributionEvent),
    /// An energy sample.
    Energy(EnergySample),
    /// Instruction counts of one kernel launch (instrumented mode).
    Instructions(InstructionCounts),
    /// PM-sampling samples of one device.
    PmSamples(PmSamples),
    /// Operation counters of one context's kernel launches (range profiler).
    OpCounts(OpCounters),
}

/// A frame with its byte offset in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocatedFrame {
    /// Byte offset of the frame's type field.
    pub offset: u64,
    /// 0-based index among the file's frames (the header is #0).
    pub index: usize,
    /// The frame.
    pub frame: Frame,
}
