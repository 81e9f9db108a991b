//! The decoded records: one type per kind family gpumeter uses, with the header fields it
//! reads, and [`Record`], the record of any kind.

use crate::kind::ActivityKind;

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
    pub(crate) fn from_raw(v: u32) -> Self {
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
