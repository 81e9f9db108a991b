//! The decoder: a pure-Rust walk of a CUPTI activity buffer.
//!
//! A buffer is what CUPTI hands to its buffer-completed callback: `validSize` bytes of records
//! back to back. Each record starts with its 4-byte little-endian `CUpti_ActivityKind`; its size
//! is fixed per kind by the producer's API version ([`ApiVersion`], [`crate::layout`]). The walk:
//!
//! * reads every field with `from_le_bytes` on a copied sub-slice, so a buffer may start at any
//!   address (no alignment is assumed, nothing is cast);
//! * never dereferences a pointer read from the bytes: pointer fields (`name`, `source`,
//!   `overheadData`) are kept as `u64` values, to be looked up in a `.gmr` string table;
//! * decodes the kinds gpumeter uses into [`Record`]s, and steps over every other kind the
//!   version defines (its size is known) as [`Record::Other`], counted in
//!   [`Decoded::skipped`] by kind name;
//! * stops with [`DecodeError::UnknownKind`] at a kind value the version does not define: its
//!   size is unknown, so the walk cannot go on (libcupti's own `cuptiActivityGetNextRecord`
//!   answers `CUPTI_ERROR_INVALID_KIND` there too);
//! * treats a kind of 0 (`CUPTI_ACTIVITY_KIND_INVALID`) followed only by zero bytes as the
//!   unused, zeroed tail of a buffer saved whole rather than at `validSize`
//!   ([`Decoded::trailing_zero_bytes`]); a kind of 0 with anything else after it is
//!   [`DecodeError::InvalidKind`];
//! * reports a record that does not fit in the bytes left as [`DecodeError::Truncated`] with
//!   its byte offset.
//!
//! The decoder never panics, whatever the bytes (fuzzed: `fuzz/`).

use std::collections::BTreeMap;
use std::fmt;

use crate::kind::ActivityKind;
use crate::layout::ApiVersion;

/// A buffer that cannot be walked. Offsets are bytes from the start of the buffer given to
/// [`decode`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The producer's `CUPTI_API_VERSION` has no layout tables here (supported: 26 for CUDA
    /// 12.8, 130001 for CUDA 13.0 and 130401 for CUDA 13.4).
    #[error(
        "CUPTI API version {0} is not supported (supported: 26 = CUDA 12.8, 130001 = CUDA 13.0, \
         130401 = CUDA 13.4)"
    )]
    UnsupportedApiVersion(u32),
    /// A record runs past the end of the buffer.
    #[error(
        "truncated record at byte {offset}: {} needs {needed} bytes, {available} left",
        match kind { Some(k) => k.to_string(), None => "the kind field".to_string() }
    )]
    Truncated {
        /// Offset of the record's first byte.
        offset: usize,
        /// The record's kind, `None` when not even the 4-byte kind fits.
        kind: Option<ActivityKind>,
        /// Bytes the record needs (its size, or 4 for the kind).
        needed: usize,
        /// Bytes left in the buffer from `offset`.
        available: usize,
    },
    /// A kind value the producer's CUPTI version does not define: its size is unknown, so the
    /// walk cannot continue.
    #[error("unknown activity kind {kind} at byte {offset} for {api}")]
    UnknownKind {
        /// Offset of the record's first byte.
        offset: usize,
        /// The kind value read.
        kind: u32,
        /// The API version whose tables were used.
        api: ApiVersion,
    },
    /// A record of kind 0 (`CUPTI_ACTIVITY_KIND_INVALID`) followed by non-zero bytes.
    #[error("invalid activity kind 0 at byte {offset}, followed by non-zero bytes")]
    InvalidKind {
        /// Offset of the record's first byte.
        offset: usize,
    },
    /// A field holds a value no real record can have (e.g. a negative grid dimension).
    #[error("{kind} record at byte {offset}: field `{field}` = {value}: {reason}")]
    BadField {
        /// Offset of the record's first byte.
        offset: usize,
        /// The record's kind.
        kind: ActivityKind,
        /// The field's name in the CUPTI header struct (`gridX`).
        field: &'static str,
        /// The value read.
        value: i64,
        /// Why it was refused.
        reason: &'static str,
    },
}

/// A read-only view of one record's bytes. Every read is bounds-checked and yields 0 when the
/// field would lie outside the record (which the layout tests rule out).
#[derive(Clone, Copy)]
struct Rec<'a>(&'a [u8]);

impl Rec<'_> {
    fn arr<const N: usize>(self, o: usize) -> [u8; N] {
        self.0
            .get(o..o.saturating_add(N))
            .and_then(|s| <[u8; N]>::try_from(s).ok())
            .unwrap_or([0; N])
    }
    fn u8(self, o: usize) -> u8 {
        self.0.get(o).copied().unwrap_or(0)
    }
    fn u16(self, o: usize) -> u16 {
        u16::from_le_bytes(self.arr(o))
    }
    fn u32(self, o: usize) -> u32 {
        u32::from_le_bytes(self.arr(o))
    }
    fn i32(self, o: usize) -> i32 {
        i32::from_le_bytes(self.arr(o))
    }
    fn u64(self, o: usize) -> u64 {
        u64::from_le_bytes(self.arr(o))
    }
    fn i64(self, o: usize) -> i64 {
        i64::from_le_bytes(self.arr(o))
    }
}

/// A kernel execution: `CUpti_ActivityKernel9` (12.8), `CUpti_ActivityKernel10` (13.0) or
/// `CUpti_ActivityKernel13` (13.4), kinds KERNEL and CONCURRENT_KERNEL. Times are ns on CUPTI's clock (CLOCK_REALTIME by default: ns
/// since the Unix epoch); 0 means not collected.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KernelRecord {
    /// KERNEL or CONCURRENT_KERNEL.
    pub kind: ActivityKind,
    /// `start`: execution start, ns.
    pub start: u64,
    /// `end`: execution end, ns.
    pub end: u64,
    /// `completed`: completion time (CDP), ns; 0 when not collected.
    pub completed: u64,
    /// `queued`: when the launch was queued, ns; 0 when not collected.
    pub queued: u64,
    /// `submitted`: when the launch was submitted, ns; 0 when not collected.
    pub submitted: u64,
    /// `deviceId`: CUDA device ordinal.
    pub device_id: u32,
    /// `contextId`.
    pub context_id: u32,
    /// `streamId`.
    pub stream_id: u32,
    /// `correlationId`: joins the API record that launched it.
    pub correlation_id: u32,
    /// `gridX`, `gridY`, `gridZ`: grid dimensions in blocks (signed in the header).
    pub grid: [i32; 3],
    /// `blockX`, `blockY`, `blockZ`: block dimensions in threads (signed in the header).
    pub block: [i32; 3],
    /// `registersPerThread`.
    pub registers_per_thread: u16,
    /// `staticSharedMemory`: static shared memory per block, bytes.
    pub static_shared_memory: i32,
    /// `dynamicSharedMemory`: dynamic shared memory per block, bytes.
    pub dynamic_shared_memory: i32,
    /// `localMemoryPerThread`: bytes.
    pub local_memory_per_thread: u32,
    /// `gridId`: unique id of the launch.
    pub grid_id: i64,
    /// `name`: the *value* of the producer's `const char *` (never dereferenced); look it up in
    /// a string table. 0 when absent.
    pub name_ptr: u64,
    /// `launchType` (`CUpti_ActivityLaunchType`: 0 regular, 1 cooperative single device, 2
    /// cooperative multi device, …).
    pub launch_type: u8,
    /// `sharedMemoryExecuted`: shared memory carveout executed, bytes per SM.
    pub shared_memory_executed: u32,
    /// `graphNodeId`: 0 when not launched from a graph.
    pub graph_node_id: u64,
    /// `graphId`: 0 when not launched from a graph.
    pub graph_id: u32,
    /// `clusterX`, `clusterY`, `clusterZ`: thread-block cluster dimensions.
    pub cluster: [u32; 3],
    /// `isDeviceLaunched` (13.x only): launched from the device (CDP).
    pub is_device_launched: Option<bool>,
}

/// A host/device memory copy: `CUpti_ActivityMemcpy6` (12.8; 13.0's has `isDeviceLaunched` in
/// 12.8's padding) or `CUpti_ActivityMemcpy7` (13.4), kind MEMCPY.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemcpyRecord {
    /// `copyKind` (`CUpti_ActivityMemcpyKind`: 1 HTOD, 2 DTOH, 3 HTOA, 4 ATOH, 5 ATOA, 6 ATOD,
    /// 7 DTOA, 8 DTOD, 9 HTOH, 10 PTOP).
    pub copy_kind: u8,
    /// `srcKind` (`CUpti_ActivityMemoryKind`).
    pub src_kind: u8,
    /// `dstKind` (`CUpti_ActivityMemoryKind`).
    pub dst_kind: u8,
    /// `flags` (`CUpti_ActivityFlag`, e.g. MEMCPY_ASYNC).
    pub flags: u8,
    /// `bytes`: bytes copied.
    pub bytes: u64,
    /// `start`, ns.
    pub start: u64,
    /// `end`, ns.
    pub end: u64,
    /// `deviceId`.
    pub device_id: u32,
    /// `contextId`.
    pub context_id: u32,
    /// `streamId`.
    pub stream_id: u32,
    /// `correlationId`.
    pub correlation_id: u32,
    /// `runtimeCorrelationId`.
    pub runtime_correlation_id: u32,
    /// `graphNodeId`.
    pub graph_node_id: u64,
    /// `graphId`.
    pub graph_id: u32,
    /// `copyCount`: copies batched in this record.
    pub copy_count: u64,
    /// `isDeviceLaunched` (13.x only).
    pub is_device_launched: Option<bool>,
}

/// A peer-to-peer copy: `CUpti_ActivityMemcpyPtoP4` (12.8, 13.0 and 13.4), kind MEMCPY2. Billed on
/// `device_id`, the device of the record.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PeerCopyRecord {
    /// `copyKind` (`CUpti_ActivityMemcpyKind`, normally 10 = PTOP).
    pub copy_kind: u8,
    /// `srcKind`.
    pub src_kind: u8,
    /// `dstKind`.
    pub dst_kind: u8,
    /// `flags`.
    pub flags: u8,
    /// `bytes`: bytes copied.
    pub bytes: u64,
    /// `start`, ns.
    pub start: u64,
    /// `end`, ns.
    pub end: u64,
    /// `deviceId`: the device that executed the copy.
    pub device_id: u32,
    /// `contextId`.
    pub context_id: u32,
    /// `streamId`.
    pub stream_id: u32,
    /// `srcDeviceId`.
    pub src_device_id: u32,
    /// `srcContextId`.
    pub src_context_id: u32,
    /// `dstDeviceId`.
    pub dst_device_id: u32,
    /// `dstContextId`.
    pub dst_context_id: u32,
    /// `correlationId`.
    pub correlation_id: u32,
    /// `graphNodeId`.
    pub graph_node_id: u64,
    /// `graphId`.
    pub graph_id: u32,
}

/// A memset: `CUpti_ActivityMemset4` (12.8; 13.0's has `isDeviceLaunched` in 12.8's padding)
/// or `CUpti_ActivityMemset5` (13.4), kind MEMSET.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemsetRecord {
    /// `value`: the value set.
    pub value: u32,
    /// `bytes`: bytes set.
    pub bytes: u64,
    /// `start`, ns.
    pub start: u64,
    /// `end`, ns.
    pub end: u64,
    /// `deviceId`.
    pub device_id: u32,
    /// `contextId`.
    pub context_id: u32,
    /// `streamId`.
    pub stream_id: u32,
    /// `correlationId`.
    pub correlation_id: u32,
    /// `flags` (`CUpti_ActivityFlag`).
    pub flags: u16,
    /// `memoryKind` (`CUpti_ActivityMemoryKind`).
    pub memory_kind: u16,
    /// `graphNodeId`.
    pub graph_node_id: u64,
    /// `graphId`.
    pub graph_id: u32,
    /// `isDeviceLaunched` (13.x only).
    pub is_device_launched: Option<bool>,
}

/// `memoryOperationType` of a MEMORY2 record (`CUpti_ActivityMemoryOperationType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemoryOperation {
    /// `CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION` (1).
    Allocation,
    /// `CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE` (2).
    Release,
    /// Any other value, kept as read.
    Other(u32),
}

impl MemoryOperation {
    fn from_raw(v: u32) -> Self {
        match v {
            1 => MemoryOperation::Allocation,
            2 => MemoryOperation::Release,
            o => MemoryOperation::Other(o),
        }
    }

    /// The header's numeric value.
    pub fn raw(self) -> u32 {
        match self {
            MemoryOperation::Allocation => 1,
            MemoryOperation::Release => 2,
            MemoryOperation::Other(v) => v,
        }
    }
}

/// A memory allocation or release: `CUpti_ActivityMemory4` (12.8, 13.0 and 13.4), kind MEMORY2.
/// Decoded for `memory_byte_ns`, which a later issue meters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryRecord {
    /// `memoryOperationType`.
    pub operation: MemoryOperation,
    /// `memoryKind` (`CUpti_ActivityMemoryKind`).
    pub memory_kind: u32,
    /// `correlationId`.
    pub correlation_id: u32,
    /// `address`: the virtual address (a value, never dereferenced).
    pub address: u64,
    /// `bytes`: bytes allocated or released.
    pub bytes: u64,
    /// `timestamp`: when the operation happened, ns.
    pub timestamp: u64,
    /// `PC`: program counter of the call.
    pub pc: u64,
    /// `processId`.
    pub process_id: u32,
    /// `deviceId`.
    pub device_id: u32,
    /// `contextId`.
    pub context_id: u32,
    /// `streamId`.
    pub stream_id: u32,
    /// `name`: pointer value of the variable's name, 0 when absent.
    pub name_ptr: u64,
    /// `isAsync`: non-zero for stream-ordered (`cudaMallocAsync`) operations.
    pub is_async: u32,
    /// `memoryPoolConfig.memoryPoolType` (`CUpti_ActivityMemoryPoolType`).
    pub pool_type: u32,
    /// `memoryPoolConfig.address`.
    pub pool_address: u64,
    /// `memoryPoolConfig.releaseThreshold`, bytes.
    pub pool_release_threshold: u64,
    /// `memoryPoolConfig.pool.size` (for an imported pool, the union's `processId`).
    pub pool_size: u64,
    /// `memoryPoolConfig.utilizedSize`, bytes.
    pub pool_utilized_size: u64,
    /// `source`: pointer value of the allocating API's name, 0 when absent.
    pub source_ptr: u64,
}

/// A device's properties: `CUpti_ActivityDevice5` (12.8 and 13.0) or `CUpti_ActivityDevice6`
/// (13.4), kind DEVICE.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceRecord {
    /// `flags` (`CUpti_ActivityFlag`).
    pub flags: u32,
    /// `globalMemoryBandwidth`: KiB/s.
    pub global_memory_bandwidth: u64,
    /// `globalMemorySize`: bytes.
    pub global_memory_size: u64,
    /// `constantMemorySize`: bytes.
    pub constant_memory_size: u32,
    /// `l2CacheSize`: bytes.
    pub l2_cache_size: u32,
    /// `numThreadsPerWarp`.
    pub threads_per_warp: u32,
    /// `coreClockRate`: kHz.
    pub core_clock_rate_khz: u32,
    /// `numMemcpyEngines`.
    pub memcpy_engines: u32,
    /// `numMultiprocessors`: SMs (of the MIG instance when MIG is on).
    pub multiprocessors: u32,
    /// `maxIPC`: maximum instructions per cycle per SM.
    pub max_ipc: u32,
    /// `maxWarpsPerMultiprocessor`.
    pub max_warps_per_sm: u32,
    /// `maxBlocksPerMultiprocessor`.
    pub max_blocks_per_sm: u32,
    /// `maxSharedMemoryPerMultiprocessor`: bytes.
    pub max_shared_memory_per_sm: u32,
    /// `maxRegistersPerMultiprocessor`: 32-bit registers.
    pub max_registers_per_sm: u32,
    /// `maxRegistersPerBlock`: 32-bit registers.
    pub max_registers_per_block: u32,
    /// `maxSharedMemoryPerBlock`: bytes.
    pub max_shared_memory_per_block: u32,
    /// `maxThreadsPerBlock`.
    pub max_threads_per_block: u32,
    /// `computeCapabilityMajor`.
    pub compute_capability_major: u32,
    /// `computeCapabilityMinor`.
    pub compute_capability_minor: u32,
    /// `id`: CUDA device ordinal (the `deviceId` of other records).
    pub id: u32,
    /// `eccEnabled`.
    pub ecc_enabled: u32,
    /// `uuid`: the device UUID's 16 bytes (all zero when unknown).
    pub uuid: [u8; 16],
    /// `name`: pointer value of the device name, 0 when absent (never dereferenced).
    pub name_ptr: u64,
    /// `isCudaVisible`.
    pub is_cuda_visible: bool,
    /// `isMigEnabled`.
    pub is_mig_enabled: bool,
    /// `gpuInstanceId` (MIG).
    pub gpu_instance_id: u32,
    /// `computeInstanceId` (MIG).
    pub compute_instance_id: u32,
    /// `migUuid`: the MIG instance's UUID bytes (all zero when none).
    pub mig_uuid: [u8; 16],
    /// `isNumaNode`.
    pub is_numa_node: u32,
    /// `numaId`.
    pub numa_id: u32,
    /// `numTpcs` (13.4 only): texture processing clusters.
    pub num_tpcs: Option<u32>,
}

/// Formats 16 UUID bytes the way `nvidia-smi -L` prints them, without prefix:
/// `74e128b2-90b6-b409-07c8-33bee5ff6f88`.
pub fn format_uuid(bytes: &[u8; 16]) -> String {
    let h = hex::encode(bytes);
    // hex::encode yields 32 ASCII digits, so these ranges are in bounds.
    format!(
        "{}-{}-{}-{}-{}",
        h.get(0..8).unwrap_or(""),
        h.get(8..12).unwrap_or(""),
        h.get(12..16).unwrap_or(""),
        h.get(16..20).unwrap_or(""),
        h.get(20..32).unwrap_or("")
    )
}

impl DeviceRecord {
    /// The device key: `MIG-<uuid>` when MIG is on and a MIG UUID is given, else
    /// `GPU-<uuid>`; `None` when the record carries no UUID (all zero bytes).
    pub fn uuid_key(&self) -> Option<String> {
        if self.is_mig_enabled && self.mig_uuid != [0; 16] {
            return Some(format!("MIG-{}", format_uuid(&self.mig_uuid)));
        }
        (self.uuid != [0; 16]).then(|| format!("GPU-{}", format_uuid(&self.uuid)))
    }
}

/// A CUDA context: `CUpti_ActivityContext3` (12.8 and 13.0) or `CUpti_ActivityContext4` (13.4),
/// kind CONTEXT. Kept for green-context SM partitions, metered by a later issue.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ContextRecord {
    /// `contextId`.
    pub context_id: u32,
    /// `deviceId`.
    pub device_id: u32,
    /// `computeApiKind` (`CUpti_ActivityComputeApiKind`: 1 CUDA, 2 CUDA MPS).
    pub compute_api_kind: u16,
    /// `nullStreamId`.
    pub null_stream_id: u16,
    /// `parentContextId`: for a green context, its primary context.
    pub parent_context_id: u32,
    /// `isGreenContext`.
    pub is_green_context: bool,
    /// `numMultiprocessors`: SMs of a green context (0 otherwise).
    pub num_multiprocessors: u16,
    /// `cigMode` (`CUpti_ContextCigMode`).
    pub cig_mode: u32,
    /// `processId` (13.4 only).
    pub process_id: Option<u64>,
}

/// A CUDA runtime or driver API call: `CUpti_ActivityAPI` (every version), kinds DRIVER,
/// RUNTIME and INTERNAL_LAUNCH_API. The source of the process id of GPU records with the same
/// correlation id.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApiRecord {
    /// DRIVER, RUNTIME or INTERNAL_LAUNCH_API.
    pub kind: ActivityKind,
    /// `cbid`: the callback id of the function (`CUpti_runtime_api_trace_cbid` /
    /// `CUpti_driver_api_trace_cbid`).
    pub cbid: u32,
    /// `start`, ns.
    pub start: u64,
    /// `end`, ns.
    pub end: u64,
    /// `processId`: OS process id of the caller.
    pub process_id: u32,
    /// `threadId`: OS thread id of the caller.
    pub thread_id: u32,
    /// `correlationId`.
    pub correlation_id: u32,
    /// `returnValue`: the call's result code.
    pub return_value: u32,
}

/// `CUpti_ExternalCorrelationKind` value `CUSTOM0` (3); `CUSTOM1` is 4 and `CUSTOM2` 5.
pub const EXTERNAL_KIND_CUSTOM0: u32 = 3;
/// `CUpti_ExternalCorrelationKind` value `CUSTOM2` (5), the last one gpumeter attributes by.
pub const EXTERNAL_KIND_CUSTOM2: u32 = 5;

/// An external correlation: `CUpti_ActivityExternalCorrelation` (every version), kind
/// EXTERNAL_CORRELATION. Ties `correlation_id` to an id the application pushed
/// (`cuptiActivityPushExternalCorrelationId`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExternalCorrelationRecord {
    /// `externalKind` (`CUpti_ExternalCorrelationKind`: 2 OPENACC, 3–5 CUSTOM0–2).
    pub external_kind: u32,
    /// `externalId`.
    pub external_id: u64,
    /// `correlationId`.
    pub correlation_id: u32,
}

/// Overhead added by CUPTI, the driver or the compiler: `CUpti_ActivityOverhead3` (every
/// version), kind OVERHEAD. Not work: counted as skipped (`overhead`) by the meter.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OverheadRecord {
    /// `overheadKind` (`CUpti_ActivityOverheadKind`).
    pub overhead_kind: u32,
    /// `objectKind` (`CUpti_ActivityObjectKind`).
    pub object_kind: u32,
    /// `objectId` as three words: `dcs.deviceId, dcs.contextId, dcs.streamId` for device
    /// objects, `pt.processId, pt.threadId, 0` for process/thread objects.
    pub object_id: [u32; 3],
    /// `start`, ns.
    pub start: u64,
    /// `end`, ns.
    pub end: u64,
    /// `correlationId`.
    pub correlation_id: u32,
    /// `overheadData`: pointer value, never dereferenced.
    pub overhead_data_ptr: u64,
}

/// One CUDA graph launch: `CUpti_ActivityGraphTrace2` (every version), kind GRAPH_TRACE. Metered
/// for `gpu_busy_ns` only.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GraphTraceRecord {
    /// `correlationId`.
    pub correlation_id: u32,
    /// `start`, ns.
    pub start: u64,
    /// `end`, ns.
    pub end: u64,
    /// `deviceId`: the device the graph started on.
    pub device_id: u32,
    /// `graphId`.
    pub graph_id: u32,
    /// `contextId`.
    pub context_id: u32,
    /// `streamId`.
    pub stream_id: u32,
    /// `endDeviceId`: the device the graph ended on (multi-device graphs).
    pub end_device_id: u32,
    /// `endContextId`.
    pub end_context_id: u32,
}

/// Per-instruction execution counts: `CUpti_ActivityInstructionExecution` (every version),
/// kind INSTRUCTION_EXECUTION. Kept for `warp_instructions`, a later issue. CUPTI
/// 13.x declares the kind unsupported: only 12.8 producers emit it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InstructionExecutionRecord {
    /// `flags` (`CUpti_ActivityFlag`).
    pub flags: u32,
    /// `sourceLocatorId`.
    pub source_locator_id: u32,
    /// `correlationId`: the kernel's.
    pub correlation_id: u32,
    /// `functionId`.
    pub function_id: u32,
    /// `pcOffset`: offset of the instruction in the function, bytes.
    pub pc_offset: u32,
    /// `threadsExecuted`: thread-level executions.
    pub threads_executed: u64,
    /// `notPredOffThreadsExecuted`: thread-level executions with the predicate on.
    pub not_pred_off_threads_executed: u64,
    /// `executed`: warp-level executions.
    pub executed: u32,
}

/// One decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Record {
    /// KERNEL or CONCURRENT_KERNEL.
    Kernel(KernelRecord),
    /// MEMCPY.
    Memcpy(MemcpyRecord),
    /// MEMCPY2 (peer copy).
    PeerCopy(PeerCopyRecord),
    /// MEMSET.
    Memset(MemsetRecord),
    /// MEMORY2.
    Memory(MemoryRecord),
    /// DEVICE.
    Device(Box<DeviceRecord>),
    /// CONTEXT.
    Context(ContextRecord),
    /// DRIVER, RUNTIME or INTERNAL_LAUNCH_API.
    Api(ApiRecord),
    /// EXTERNAL_CORRELATION.
    ExternalCorrelation(ExternalCorrelationRecord),
    /// OVERHEAD.
    Overhead(OverheadRecord),
    /// GRAPH_TRACE.
    GraphTrace(GraphTraceRecord),
    /// INSTRUCTION_EXECUTION.
    InstructionExecution(InstructionExecutionRecord),
    /// A kind the version defines but gpumeter does not decode (stepped over by its size).
    Other(ActivityKind),
}

/// A record with its place in the buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocatedRecord {
    /// Byte offset of the record's first byte in the buffer.
    pub offset: usize,
    /// Its kind.
    pub kind: ActivityKind,
    /// Its size in bytes (the kind's size in the producer's version).
    pub size: usize,
    /// The decoded record.
    pub record: Record,
}

/// A walked buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// The version whose layouts were used.
    pub api: ApiVersion,
    /// Every record, in buffer order.
    pub records: Vec<LocatedRecord>,
    /// Records of kinds stepped over ([`Record::Other`]), by lower-case kind name
    /// (`marker`, `synchronization`).
    pub skipped: BTreeMap<&'static str, u64>,
    /// Zero bytes after the last record (a buffer saved whole rather than at `validSize`).
    pub trailing_zero_bytes: usize,
}

impl fmt::Display for Decoded {
    /// `N records (CUPTI 12.8 (API 26))`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} records ({})", self.records.len(), self.api)
    }
}

/// Walks a buffer of CUPTI activity records laid out by the producer's API version `api`.
///
/// `buf` holds the `validSize` bytes CUPTI handed over, at any alignment.
///
/// ```
/// use gpumeter_cupti::{decode, ActivityKind, ApiVersion, Record};
/// // A 12.8 RUNTIME record (`CUpti_ActivityAPI`, 40 bytes): kind 5, processId 4242 at 24.
/// let mut rec = [0u8; 40];
/// rec[0..4].copy_from_slice(&5u32.to_le_bytes());
/// rec[24..28].copy_from_slice(&4242u32.to_le_bytes());
/// let d = decode(&rec, ApiVersion::Cupti12_8)?;
/// assert_eq!(d.records[0].kind, ActivityKind::RUNTIME);
/// assert!(matches!(&d.records[0].record, Record::Api(a) if a.process_id == 4242));
/// # Ok::<(), gpumeter_cupti::DecodeError>(())
/// ```
///
/// # Errors
/// [`DecodeError::Truncated`] for a record that runs past the end, [`DecodeError::UnknownKind`]
/// for a kind the version does not define, [`DecodeError::InvalidKind`] for a kind-0 record
/// that is not a zeroed tail. Everything up to the fault is discarded: a buffer decodes whole or
/// not at all.
pub fn decode(buf: &[u8], api: ApiVersion) -> Result<Decoded, DecodeError> {
    match decode_prefix(buf, api) {
        (d, None) => Ok(d),
        (_, Some(e)) => Err(e),
    }
}

/// Counts `record` under its category in `skipped` when it is of a kind the meter steps over
/// ([`ActivityKind::category`]); any other record counts nothing.
pub fn count_skipped(record: &Record, skipped: &mut BTreeMap<&'static str, u64>) {
    if let Record::Other(k) = record {
        if let Some(cat) = k.category() {
            *skipped.entry(cat).or_insert(0) += 1;
        }
    }
}

/// As [`decode`], but keeps what decodes before a fault: the records up to it, and the fault
/// (`None` when the whole buffer decodes). For a buffer whose bytes are known to be what the
/// producer wrote (a `.gmr` frame whose checksum is right), the records before the fault are
/// sound; the fault ends the walk because the size of what follows is unknown.
pub fn decode_prefix(buf: &[u8], api: ApiVersion) -> (Decoded, Option<DecodeError>) {
    let mut walk = Walk::new(buf, api);
    let mut out = Decoded {
        api,
        records: Vec::new(),
        skipped: BTreeMap::new(),
        trailing_zero_bytes: 0,
    };
    for rec in walk.by_ref() {
        let rec = match rec {
            Ok(r) => r,
            Err(e) => return (out, Some(e)),
        };
        count_skipped(&rec.record, &mut out.skipped);
        out.records.push(rec);
    }
    out.trailing_zero_bytes = walk.trailing_zero_bytes();
    (out, None)
}

/// The walk behind [`decode`] as an iterator: one record at a time, without collecting (for
/// streaming consumers). Yields `Err` once at the first fault, then ends.
///
/// ```
/// use gpumeter_cupti::{ApiVersion, Walk};
/// let mut rec = [0u8; 40];
/// rec[0..4].copy_from_slice(&5u32.to_le_bytes()); // RUNTIME, `CUpti_ActivityAPI`
/// let mut walk = Walk::new(&rec, ApiVersion::Cupti12_8);
/// assert_eq!(walk.next().map(|r| r.map(|r| r.offset)), Some(Ok(0)));
/// assert!(walk.next().is_none());
/// ```
#[derive(Debug, Clone)]
pub struct Walk<'a> {
    buf: &'a [u8],
    api: ApiVersion,
    offset: usize,
    trailing_zero_bytes: usize,
    done: bool,
}

impl<'a> Walk<'a> {
    /// A walk of `buf` (any alignment) with the layouts of `api`.
    pub fn new(buf: &'a [u8], api: ApiVersion) -> Self {
        Walk {
            buf,
            api,
            offset: 0,
            trailing_zero_bytes: 0,
            done: false,
        }
    }

    /// Zero bytes found after the last record (valid once the walk has ended without error).
    pub fn trailing_zero_bytes(&self) -> usize {
        self.trailing_zero_bytes
    }

    fn step(&mut self) -> Option<Result<LocatedRecord, DecodeError>> {
        let offset = self.offset;
        let rest = self.buf.get(offset..).unwrap_or(&[]);
        if rest.is_empty() {
            return None;
        }
        let available = rest.len();
        let Some(head) = rest.get(0..4) else {
            if rest.iter().all(|&b| b == 0) {
                self.trailing_zero_bytes = available;
                return None;
            }
            return Some(Err(DecodeError::Truncated {
                offset,
                kind: None,
                needed: 4,
                available,
            }));
        };
        let raw_kind = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        if raw_kind == 0 {
            if rest.iter().all(|&b| b == 0) {
                self.trailing_zero_bytes = available;
                return None;
            }
            return Some(Err(DecodeError::InvalidKind { offset }));
        }
        let kind = ActivityKind(raw_kind);
        let Some(size) = self.api.record_size(kind) else {
            return Some(Err(DecodeError::UnknownKind {
                offset,
                kind: raw_kind,
                api: self.api,
            }));
        };
        let Some(bytes) = rest.get(..size) else {
            return Some(Err(DecodeError::Truncated {
                offset,
                kind: Some(kind),
                needed: size,
                available,
            }));
        };
        self.offset = offset + size;
        Some(Ok(LocatedRecord {
            offset,
            kind,
            size,
            record: decode_record(Rec(bytes), kind, self.api),
        }))
    }
}

impl Iterator for Walk<'_> {
    type Item = Result<LocatedRecord, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.step();
        if !matches!(item, Some(Ok(_))) {
            self.done = true;
        }
        item
    }
}

fn flag(v: Option<u8>) -> Option<bool> {
    v.map(|b| b != 0)
}

fn decode_record(r: Rec<'_>, kind: ActivityKind, api: ApiVersion) -> Record {
    let t = api.tables();
    match kind {
        ActivityKind::KERNEL | ActivityKind::CONCURRENT_KERNEL => {
            let l = &t.kernel;
            Record::Kernel(KernelRecord {
                kind,
                start: r.u64(l.start),
                end: r.u64(l.end),
                completed: r.u64(l.completed),
                queued: r.u64(l.queued),
                submitted: r.u64(l.submitted),
                device_id: r.u32(l.device_id),
                context_id: r.u32(l.context_id),
                stream_id: r.u32(l.stream_id),
                correlation_id: r.u32(l.correlation_id),
                grid: [r.i32(l.grid_x), r.i32(l.grid_y), r.i32(l.grid_z)],
                block: [r.i32(l.block_x), r.i32(l.block_y), r.i32(l.block_z)],
                registers_per_thread: r.u16(l.registers_per_thread),
                static_shared_memory: r.i32(l.static_shared_memory),
                dynamic_shared_memory: r.i32(l.dynamic_shared_memory),
                local_memory_per_thread: r.u32(l.local_memory_per_thread),
                grid_id: r.i64(l.grid_id),
                name_ptr: r.u64(l.name_ptr),
                launch_type: r.u8(l.launch_type),
                shared_memory_executed: r.u32(l.shared_memory_executed),
                graph_node_id: r.u64(l.graph_node_id),
                graph_id: r.u32(l.graph_id),
                cluster: [r.u32(l.cluster_x), r.u32(l.cluster_y), r.u32(l.cluster_z)],
                is_device_launched: flag(l.is_device_launched.map(|o| r.u8(o))),
            })
        }
        ActivityKind::MEMCPY => {
            let l = &t.memcpy;
            Record::Memcpy(MemcpyRecord {
                copy_kind: r.u8(l.copy_kind),
                src_kind: r.u8(l.src_kind),
                dst_kind: r.u8(l.dst_kind),
                flags: r.u8(l.flags),
                bytes: r.u64(l.bytes),
                start: r.u64(l.start),
                end: r.u64(l.end),
                device_id: r.u32(l.device_id),
                context_id: r.u32(l.context_id),
                stream_id: r.u32(l.stream_id),
                correlation_id: r.u32(l.correlation_id),
                runtime_correlation_id: r.u32(l.runtime_correlation_id),
                graph_node_id: r.u64(l.graph_node_id),
                graph_id: r.u32(l.graph_id),
                copy_count: r.u64(l.copy_count),
                is_device_launched: flag(l.is_device_launched.map(|o| r.u8(o))),
            })
        }
        ActivityKind::MEMCPY2 => {
            let l = &t.peer_copy;
            Record::PeerCopy(PeerCopyRecord {
                copy_kind: r.u8(l.copy_kind),
                src_kind: r.u8(l.src_kind),
                dst_kind: r.u8(l.dst_kind),
                flags: r.u8(l.flags),
                bytes: r.u64(l.bytes),
                start: r.u64(l.start),
                end: r.u64(l.end),
                device_id: r.u32(l.device_id),
                context_id: r.u32(l.context_id),
                stream_id: r.u32(l.stream_id),
                src_device_id: r.u32(l.src_device_id),
                src_context_id: r.u32(l.src_context_id),
                dst_device_id: r.u32(l.dst_device_id),
                dst_context_id: r.u32(l.dst_context_id),
                correlation_id: r.u32(l.correlation_id),
                graph_node_id: r.u64(l.graph_node_id),
                graph_id: r.u32(l.graph_id),
            })
        }
        ActivityKind::MEMSET => {
            let l = &t.memset;
            Record::Memset(MemsetRecord {
                value: r.u32(l.value),
                bytes: r.u64(l.bytes),
                start: r.u64(l.start),
                end: r.u64(l.end),
                device_id: r.u32(l.device_id),
                context_id: r.u32(l.context_id),
                stream_id: r.u32(l.stream_id),
                correlation_id: r.u32(l.correlation_id),
                flags: r.u16(l.flags),
                memory_kind: r.u16(l.memory_kind),
                graph_node_id: r.u64(l.graph_node_id),
                graph_id: r.u32(l.graph_id),
                is_device_launched: flag(l.is_device_launched.map(|o| r.u8(o))),
            })
        }
        ActivityKind::MEMORY2 => {
            let l = &t.memory;
            Record::Memory(MemoryRecord {
                operation: MemoryOperation::from_raw(r.u32(l.memory_operation_type)),
                memory_kind: r.u32(l.memory_kind),
                correlation_id: r.u32(l.correlation_id),
                address: r.u64(l.address),
                bytes: r.u64(l.bytes),
                timestamp: r.u64(l.timestamp),
                pc: r.u64(l.pc),
                process_id: r.u32(l.process_id),
                device_id: r.u32(l.device_id),
                context_id: r.u32(l.context_id),
                stream_id: r.u32(l.stream_id),
                name_ptr: r.u64(l.name_ptr),
                is_async: r.u32(l.is_async),
                pool_type: r.u32(l.pool_type),
                pool_address: r.u64(l.pool_address),
                pool_release_threshold: r.u64(l.pool_release_threshold),
                pool_size: r.u64(l.pool_size),
                pool_utilized_size: r.u64(l.pool_utilized_size),
                source_ptr: r.u64(l.source_ptr),
            })
        }
        ActivityKind::DEVICE => {
            let l = &t.device;
            Record::Device(Box::new(DeviceRecord {
                flags: r.u32(l.flags),
                global_memory_bandwidth: r.u64(l.global_memory_bandwidth),
                global_memory_size: r.u64(l.global_memory_size),
                constant_memory_size: r.u32(l.constant_memory_size),
                l2_cache_size: r.u32(l.l2_cache_size),
                threads_per_warp: r.u32(l.num_threads_per_warp),
                core_clock_rate_khz: r.u32(l.core_clock_rate),
                memcpy_engines: r.u32(l.num_memcpy_engines),
                multiprocessors: r.u32(l.num_multiprocessors),
                max_ipc: r.u32(l.max_ipc),
                max_warps_per_sm: r.u32(l.max_warps_per_multiprocessor),
                max_blocks_per_sm: r.u32(l.max_blocks_per_multiprocessor),
                max_shared_memory_per_sm: r.u32(l.max_shared_memory_per_multiprocessor),
                max_registers_per_sm: r.u32(l.max_registers_per_multiprocessor),
                max_registers_per_block: r.u32(l.max_registers_per_block),
                max_shared_memory_per_block: r.u32(l.max_shared_memory_per_block),
                max_threads_per_block: r.u32(l.max_threads_per_block),
                compute_capability_major: r.u32(l.compute_capability_major),
                compute_capability_minor: r.u32(l.compute_capability_minor),
                id: r.u32(l.id),
                ecc_enabled: r.u32(l.ecc_enabled),
                uuid: r.arr(l.uuid),
                name_ptr: r.u64(l.name_ptr),
                is_cuda_visible: r.u8(l.is_cuda_visible) != 0,
                is_mig_enabled: r.u8(l.is_mig_enabled) != 0,
                gpu_instance_id: r.u32(l.gpu_instance_id),
                compute_instance_id: r.u32(l.compute_instance_id),
                mig_uuid: r.arr(l.mig_uuid),
                is_numa_node: r.u32(l.is_numa_node),
                numa_id: r.u32(l.numa_id),
                num_tpcs: l.num_tpcs.map(|o| r.u32(o)),
            }))
        }
        ActivityKind::CONTEXT => {
            let l = &t.context;
            Record::Context(ContextRecord {
                context_id: r.u32(l.context_id),
                device_id: r.u32(l.device_id),
                compute_api_kind: r.u16(l.compute_api_kind),
                null_stream_id: r.u16(l.null_stream_id),
                parent_context_id: r.u32(l.parent_context_id),
                is_green_context: r.u8(l.is_green_context) != 0,
                num_multiprocessors: r.u16(l.num_multiprocessors),
                cig_mode: r.u32(l.cig_mode),
                process_id: l.process_id.map(|o| r.u64(o)),
            })
        }
        ActivityKind::DRIVER | ActivityKind::RUNTIME | ActivityKind::INTERNAL_LAUNCH_API => {
            let l = &t.api;
            Record::Api(ApiRecord {
                kind,
                cbid: r.u32(l.cbid),
                start: r.u64(l.start),
                end: r.u64(l.end),
                process_id: r.u32(l.process_id),
                thread_id: r.u32(l.thread_id),
                correlation_id: r.u32(l.correlation_id),
                return_value: r.u32(l.return_value),
            })
        }
        ActivityKind::EXTERNAL_CORRELATION => {
            let l = &t.external_correlation;
            Record::ExternalCorrelation(ExternalCorrelationRecord {
                external_kind: r.u32(l.external_kind),
                external_id: r.u64(l.external_id),
                correlation_id: r.u32(l.correlation_id),
            })
        }
        ActivityKind::OVERHEAD => {
            let l = &t.overhead;
            Record::Overhead(OverheadRecord {
                overhead_kind: r.u32(l.overhead_kind),
                object_kind: r.u32(l.object_kind),
                object_id: [
                    r.u32(l.object_id_0),
                    r.u32(l.object_id_1),
                    r.u32(l.object_id_2),
                ],
                start: r.u64(l.start),
                end: r.u64(l.end),
                correlation_id: r.u32(l.correlation_id),
                overhead_data_ptr: r.u64(l.overhead_data_ptr),
            })
        }
        ActivityKind::GRAPH_TRACE => {
            let l = &t.graph_trace;
            Record::GraphTrace(GraphTraceRecord {
                correlation_id: r.u32(l.correlation_id),
                start: r.u64(l.start),
                end: r.u64(l.end),
                device_id: r.u32(l.device_id),
                graph_id: r.u32(l.graph_id),
                context_id: r.u32(l.context_id),
                stream_id: r.u32(l.stream_id),
                end_device_id: r.u32(l.end_device_id),
                end_context_id: r.u32(l.end_context_id),
            })
        }
        ActivityKind::INSTRUCTION_EXECUTION => {
            let l = &t.instruction_execution;
            Record::InstructionExecution(InstructionExecutionRecord {
                flags: r.u32(l.flags),
                source_locator_id: r.u32(l.source_locator_id),
                correlation_id: r.u32(l.correlation_id),
                function_id: r.u32(l.function_id),
                pc_offset: r.u32(l.pc_offset),
                threads_executed: r.u64(l.threads_executed),
                not_pred_off_threads_executed: r.u64(l.not_pred_off_threads_executed),
                executed: r.u32(l.executed),
            })
        }
        other => Record::Other(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_lies_inside_its_record() {
        for api in ApiVersion::ALL {
            for kl in api.layouts() {
                assert_eq!(kl.size % 8, 0, "{api} {}", kl.struct_name);
                for f in &kl.fields {
                    assert!(
                        f.offset + f.width <= kl.size,
                        "{api} {}.{}",
                        kl.struct_name,
                        f.name
                    );
                }
                if !kl.fields.is_empty() {
                    assert_eq!(kl.fields[0].name, "kind");
                    assert_eq!((kl.fields[0].offset, kl.fields[0].width), (0, 4));
                }
            }
        }
    }

    #[test]
    fn uuid_format() {
        let u = [
            0x74, 0xe1, 0x28, 0xb2, 0x90, 0xb6, 0xb4, 0x09, 0x07, 0xc8, 0x33, 0xbe, 0xe5, 0xff,
            0x6f, 0x88,
        ];
        assert_eq!(format_uuid(&u), "74e128b2-90b6-b409-07c8-33bee5ff6f88");
    }
}
