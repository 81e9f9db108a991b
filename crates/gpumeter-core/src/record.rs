//! Activity records: the GPU work the meters consume, one per CUPTI activity record (or per
//! Kineto GPU event, or per Nsight row), already converted to ns since the Unix epoch.

use std::sync::Arc;

/// Index of a device registered with a [`Meter`](crate::Meter)
/// ([`Meter::register_device`](crate::Meter::register_device)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceSlot(pub u32);

/// A partition of a device's SMs registered with a [`Meter`](crate::Meter)
/// ([`Meter::register_partition`](crate::Meter::register_partition)): a green context. Valid
/// only with the device it was registered on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionId(pub u32);

/// Direction of a memory copy (CUPTI `CUpti_ActivityMemcpyKind`, collapsed to the billing
/// directions of the `memcpy_*_bytes` meters: host to device, device to host, device to device,
/// peer, other).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CopyDirection {
    /// Host to device (`HTOD`, and `ATOD` array copies count as other).
    HostToDevice,
    /// Device to host (`DTOH`).
    DeviceToHost,
    /// Device to device on one GPU (`DTOD`).
    DeviceToDevice,
    /// Peer copy between two GPUs (`PTOP`); billed on the device of its record.
    Peer,
    /// Anything else (host to host, array copies, unknown).
    Other,
}

/// Launch configuration of a kernel (CUPTI `CUpti_ActivityKernel*`: `gridX..Z`, `blockX..Z`,
/// `registersPerThread`, `staticSharedMemory`, `dynamicSharedMemory`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KernelLaunch {
    /// Grid dimensions in blocks; `None` when the source does not give them.
    pub grid: Option<[u32; 3]>,
    /// Block dimensions in threads; `None` when unknown.
    pub block: Option<[u32; 3]>,
    /// Registers per thread; `None` when unknown.
    pub registers_per_thread: Option<u32>,
    /// Static plus dynamic shared memory per block, bytes; `None` when unknown.
    pub shared_mem_bytes: Option<u64>,
    /// Kernel (function) name, if known. Names are informational, never metered.
    pub name: Option<Arc<str>>,
    /// Warp-level instructions the launch executed (`warp_instructions`), when the
    /// source measured them: Σ `executed` of CUPTI INSTRUCTION_EXECUTION records with the
    /// kernel's `correlationId`, or Σ `smsp__sass_inst_executed` of the SASS-metrics data
    /// flushed for the launch. `None` when not measured.
    pub warp_instructions: Option<u64>,
    /// Floating-point and tensor-core operations the launch executed (`flops_fp64`,
    /// `flops_fp32`, `flops_fp16`, `tensor_ops`), each when the source measured it: CUPTI's
    /// SASS op and tensor-path counters of the kernel's profiler range
    /// ([`OpCounts`](crate::OpCounts), `ops.rs`). `None` when nothing was measured (boxed:
    /// most records carry no counts, and a record's size is what the decode and meter move
    /// around; [`KernelLaunch::op_counts`], [`KernelLaunch::set_op_counts`]).
    pub ops: Option<Box<crate::ops::OpCounts>>,
}

impl KernelLaunch {
    /// The launch's operation counts (all `None` when it has none).
    pub fn op_counts(&self) -> crate::ops::OpCounts {
        self.ops.as_deref().copied().unwrap_or_default()
    }

    /// Sets the launch's operation counts (`ops` is `None` when `counts` holds none).
    pub fn set_op_counts(&mut self, counts: crate::ops::OpCounts) {
        self.ops = (!counts.is_empty()).then(|| Box::new(counts));
    }

    /// Blocks in the grid (`gridX·gridY·gridZ`), `None` when the grid is unknown. The product
    /// saturates at `u64::MAX` (a grid of up to 2³¹−1 × 65535 × 65535 blocks exceeds no GPU's
    /// SM count either way).
    pub fn blocks(&self) -> Option<u64> {
        self.grid.map(|g| {
            u64::from(g[0])
                .saturating_mul(u64::from(g[1]))
                .saturating_mul(u64::from(g[2]))
        })
    }
}

/// What a record did.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Work {
    /// A kernel execution (CUPTI CONCURRENT_KERNEL/KERNEL, Kineto `kernel`, nsys
    /// `CUPTI_ACTIVITY_KIND_KERNEL`).
    Kernel(KernelLaunch),
    /// A memory copy of `bytes` bytes.
    Memcpy {
        /// Bytes copied.
        bytes: u64,
        /// Direction.
        direction: CopyDirection,
    },
    /// A memset of `bytes` bytes.
    Memset {
        /// Bytes set.
        bytes: u64,
    },
    /// A CUDA graph launch traced as one record (CUPTI GRAPH_TRACE): `gpu_busy_ns` only.
    GraphLaunch,
}

impl Work {
    /// The record-count bucket of this work in a usage report (`kernel`, `memcpy`, `memset`,
    /// `graph`).
    pub fn kind_name(&self) -> &'static str {
        match self {
            Work::Kernel(_) => "kernel",
            Work::Memcpy { .. } => "memcpy",
            Work::Memset { .. } => "memset",
            Work::GraphLaunch => "graph",
        }
    }
}

/// One unit of GPU work as the meter sees it.
///
/// Times are ns since the Unix epoch (CUPTI's clock). A `start_ns` or `end_ns` of 0
/// means the source did not record it; the meter counts such a record as loss.
///
/// Two records are *the same record* (a duplicate) when every field the GPU record
/// itself gives is equal ([`ActivityRecord::identity`]) and the facts a source joins from
/// elsewhere agree where both know them ([`ActivityRecord::joined`], [`Joined::agrees`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActivityRecord {
    /// Device that executed the work.
    pub device: DeviceSlot,
    /// Start, ns since the epoch.
    pub start_ns: u64,
    /// End, ns since the epoch (exclusive).
    pub end_ns: u64,
    /// CUDA context id (CUPTI `contextId`).
    pub context_id: u32,
    /// CUDA stream id (CUPTI `streamId`).
    pub stream_id: u32,
    /// Correlation id joining the record to its API call (CUPTI `correlationId`).
    pub correlation_id: u32,
    /// CUDA graph node id, 0 when not launched from a graph (CUPTI `graphNodeId`).
    pub graph_node_id: u64,
    /// Process id of the launching process, when known.
    pub process_id: Option<u32>,
    /// External correlation id (CUPTI EXTERNAL_CORRELATION, Kineto `External id`), when known.
    pub external_id: Option<u64>,
    /// The SM partition (green context) the work ran in, `None` for the whole device. The
    /// source resolves its own context ids to partitions: context ids are per process.
    pub partition: Option<PartitionId>,
    /// What the record did.
    pub work: Work,
}

impl ActivityRecord {
    /// The record as the GPU gave it, a duplicate key (the same record is equal in
    /// every field its source gives): start, end, context, stream, correlation id, graph node
    /// id and the work (kind, launch configuration, bytes, direction). Cleared: what the meter
    /// or the source adds — `device` and `partition` (the meter's slots), and the facts a
    /// source joins from other records or may not know ([`ActivityRecord::joined`]: the
    /// process id from API records or a recording's header, the external id, the kernel name
    /// from a string table, the instruction and operation counts from other frames). Two sources of the same
    /// work can differ in those (a raw buffer and the `.gmr` it came from, a trace with and
    /// without its CPU events), so they are compared by [`Joined::agrees`] instead.
    pub fn identity(&self) -> ActivityRecord {
        let work = match &self.work {
            // Field by field: cloning the whole launch would copy its boxed counts only to
            // drop them (an allocation per record).
            Work::Kernel(k) => Work::Kernel(KernelLaunch {
                grid: k.grid,
                block: k.block,
                registers_per_thread: k.registers_per_thread,
                shared_mem_bytes: k.shared_mem_bytes,
                name: None,
                warp_instructions: None,
                ops: None,
            }),
            w => w.clone(),
        };
        ActivityRecord {
            device: DeviceSlot(0),
            partition: None,
            process_id: None,
            external_id: None,
            work,
            ..*self
        }
    }

    /// The facts the source joined to the record ([`ActivityRecord::identity`] leaves them
    /// out).
    pub fn joined(&self) -> Joined {
        let (name, warp_instructions, ops) = match &self.work {
            Work::Kernel(k) => (k.name.clone(), k.warp_instructions, k.op_counts()),
            _ => (None, None, crate::ops::OpCounts::default()),
        };
        Joined {
            process_id: self.process_id,
            external_id: self.external_id,
            name,
            warp_instructions,
            ops,
        }
    }

    /// A record with every optional join field empty.
    pub fn new(device: DeviceSlot, start_ns: u64, end_ns: u64, work: Work) -> Self {
        ActivityRecord {
            device,
            start_ns,
            end_ns,
            context_id: 0,
            stream_id: 0,
            correlation_id: 0,
            graph_node_id: 0,
            process_id: None,
            external_id: None,
            partition: None,
            work,
        }
    }
}

/// What a source joined to a record from elsewhere, or may not know: two records with the same
/// [`ActivityRecord::identity`] are the same record when these [agree](Joined::agrees).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Joined {
    /// Process id (from API records, a recording's header, CPU-side events).
    pub process_id: Option<u32>,
    /// External correlation id.
    pub external_id: Option<u64>,
    /// Kernel name (from a string table, or the event).
    pub name: Option<Arc<str>>,
    /// Warp-level instructions (from SASS-metrics frames or INSTRUCTION_EXECUTION records).
    pub warp_instructions: Option<u64>,
    /// Operation counts (from profiler ranges or range-profiler frames).
    pub ops: crate::ops::OpCounts,
}

impl Joined {
    /// Whether two records' joined facts can be of one record: every fact that both know is
    /// equal (one that only one of them knows says nothing). Two processes' records with the
    /// same fields stay two records; a raw buffer's record (no name, no process id) and the
    /// same record of its `.gmr` (both known) are one.
    pub fn agrees(&self, other: &Joined) -> bool {
        fn same<T: PartialEq>(a: &Option<T>, b: &Option<T>) -> bool {
            match (a, b) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
        }
        same(&self.process_id, &other.process_id)
            && same(&self.external_id, &other.external_id)
            && same(&self.name, &other.name)
            && same(&self.warp_instructions, &other.warp_instructions)
            && self.ops.agrees(&other.ops)
    }
}

/// One sample of CUPTI's PM sampling on one device: what the hardware counters counted from
/// `start_ns` to `end_ns` (CUPTI's clock, the clock of the activity records; the sample's
/// `startTimestamp` and `endTimestamp` from `cuptiPmSamplingCounterDataGetSampleInfo`,
/// `cupti_pmsampling.h`, CUDA 12.6+). A counter the collector did not sample is `None`.
///
/// Quantities it yields ([`Meter::push_pm_sample`](crate::Meter::push_pm_sample)):
/// `sm_active_ns` = ⌊(end − start) × `sm_active_cycles` ÷ `sm_elapsed_cycles`⌋ SM·ns (the
/// number of SMs active on average over the interval, times its length), and `dram_bytes` =
/// `dram_read_bytes` + `dram_write_bytes`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PmSample {
    /// Sample start, ns on CUPTI's clock.
    pub start_ns: u64,
    /// Sample end, ns on CUPTI's clock.
    pub end_ns: u64,
    /// Σ over the device's SMs of the cycles in which the SM had at least one warp resident
    /// (metric `sm__cycles_active.sum`), cycles.
    pub sm_active_cycles: Option<u64>,
    /// Cycles elapsed on one SM over the sample (metric `sm__cycles_elapsed.max`), cycles.
    pub sm_elapsed_cycles: Option<u64>,
    /// Bytes read from device memory (metric `dram__bytes_read.sum`), bytes.
    pub dram_read_bytes: Option<u64>,
    /// Bytes written to device memory (metric `dram__bytes_write.sum`), bytes.
    pub dram_write_bytes: Option<u64>,
    /// Whether CUPTI reported a hardware-buffer overflow before this sample
    /// ([`LossReason::PmSampleOverflow`]): samples between the previous one and this were lost.
    pub overflow: bool,
}

/// Why a record was not metered. A lost record feeds no meter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LossReason {
    /// CUPTI dropped records (buffer full); counts are deltas, summed.
    Dropped,
    /// Start or end timestamp of 0 (not collected).
    ZeroTimestamp,
    /// End before start (e.g. a negative Kineto `dur`).
    EndBeforeStart,
    /// Duration over 7 days.
    TooLong,
    /// Arrived later than the reordering horizon allows.
    Late,
    /// A memory release with no allocation.
    ReleaseWithoutAllocation,
    /// The same record seen twice within the reordering horizon.
    Duplicate,
    /// A record with a field that cannot be represented (not a number, out of range, missing
    /// where required, a negative grid dimension); the report's warnings name the field.
    InvalidField,
    /// A record in the torn last frame of a `.gmr` (the producer stopped mid-write).
    TornFrame,
    /// A record in a `.gmr` frame whose checksum does not match, or after the point where the
    /// file's framing is lost.
    CorruptFrame,
    /// A kernel that would start while its device already runs
    /// [`MAX_RESIDENT_GRIDS`](crate::MAX_RESIDENT_GRIDS) kernels: more concurrent kernels than
    /// any GPU runs, so not a record of real work.
    ConcurrentKernelLimit,
    /// CUPTI PM sampling's hardware buffer overflowed before a sample was decoded: samples
    /// the hardware took were overwritten, so `sm_active_ns` and `dram_bytes` miss what they
    /// measured (counted once per overflow CUPTI reports, the samples lost being unknown).
    PmSampleOverflow,
}

impl LossReason {
    /// The reason's name in reports (`zero_timestamp`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            LossReason::Dropped => "dropped",
            LossReason::ZeroTimestamp => "zero_timestamp",
            LossReason::EndBeforeStart => "end_before_start",
            LossReason::TooLong => "too_long",
            LossReason::Late => "late",
            LossReason::ReleaseWithoutAllocation => "release_without_allocation",
            LossReason::Duplicate => "duplicate",
            LossReason::InvalidField => "invalid_field",
            LossReason::TornFrame => "torn_frame",
            LossReason::CorruptFrame => "corrupt_frame",
            LossReason::ConcurrentKernelLimit => "concurrent_kernel_limit",
            LossReason::PmSampleOverflow => "pm_sample_overflow",
        }
    }

    /// Every reason, in report order.
    pub const ALL: [LossReason; 12] = [
        LossReason::Dropped,
        LossReason::ZeroTimestamp,
        LossReason::EndBeforeStart,
        LossReason::TooLong,
        LossReason::Late,
        LossReason::ReleaseWithoutAllocation,
        LossReason::Duplicate,
        LossReason::InvalidField,
        LossReason::TornFrame,
        LossReason::CorruptFrame,
        LossReason::ConcurrentKernelLimit,
        LossReason::PmSampleOverflow,
    ];
}

/// The report warning for records lost to one field (`invalid_field`): the first such record's
/// message (file, record, field, value, why) and how many more there were. Every source writes
/// it the same way.
pub fn invalid_field_warning(first: &str, records: u64) -> crate::Warning {
    let message = match records {
        0 | 1 => format!("{first}; the record was lost (invalid_field)"),
        n => format!(
            "{first}; this and {} more records with this field were lost (invalid_field)",
            n - 1
        ),
    };
    crate::Warning::new(crate::WarningCode::InvalidField, message)
}

/// What a memory record did (CUPTI `CUpti_ActivityMemoryOperationType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemoryOp {
    /// `CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION`: `bytes` become held at `address`.
    Allocation,
    /// `CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE`: the allocation at `address` ends.
    Release,
    /// The process ([`MemoryEvent::process_id`]) ended, or stopped being recorded, at the
    /// timestamp: every allocation it still holds on the device ends there (the driver frees a
    /// process's memory when it exits). `address` and `bytes` are ignored. Sources emit it
    /// at the end of a finished recording.
    ProcessExit,
}

/// A device-memory allocation or release (CUPTI MEMORY2, `CUpti_ActivityMemory4`), the input
/// of `memory_byte_ns`: allocations and releases are paired by device and
/// `address`; the allocation's bytes are held from its timestamp to the release's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemoryEvent {
    /// Device whose memory it is.
    pub device: DeviceSlot,
    /// When it happened, ns since the epoch (CUPTI `timestamp`).
    pub timestamp_ns: u64,
    /// Virtual address (CUPTI `address`), the pairing key; a value, never dereferenced.
    pub address: u64,
    /// Bytes allocated (CUPTI `bytes`). For a release, informational: the allocation's bytes
    /// are billed.
    pub bytes: u64,
    /// Allocation or release.
    pub op: MemoryOp,
    /// CUDA context id (CUPTI `contextId`).
    pub context_id: u32,
    /// Correlation id of the API call (CUPTI `correlationId`).
    pub correlation_id: u32,
    /// Process id of the allocating process, when known (CUPTI `processId`).
    pub process_id: Option<u32>,
    /// External correlation id, when known.
    pub external_id: Option<u64>,
}

impl MemoryEvent {
    /// The event as a duplicate key: every field the record gives, with `device` (the
    /// meter's slot) and the joined `process_id` and `external_id` cleared (compared by
    /// [`MemoryEvent::joined`] and [`Joined::agrees`], as for [`ActivityRecord::identity`]).
    pub fn identity(&self) -> MemoryEvent {
        MemoryEvent {
            device: DeviceSlot(0),
            process_id: None,
            external_id: None,
            ..self.clone()
        }
    }

    /// The facts joined to the event (its process id and external id).
    pub fn joined(&self) -> Joined {
        Joined {
            process_id: self.process_id,
            external_id: self.external_id,
            ..Joined::default()
        }
    }

    /// An event with every optional join field empty.
    pub fn new(
        device: DeviceSlot,
        timestamp_ns: u64,
        address: u64,
        bytes: u64,
        op: MemoryOp,
    ) -> Self {
        MemoryEvent {
            device,
            timestamp_ns,
            address,
            bytes,
            op,
            context_id: 0,
            correlation_id: 0,
            process_id: None,
            external_id: None,
        }
    }
}
