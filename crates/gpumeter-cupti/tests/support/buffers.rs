// Shared by the integration tests of gpumeter-cupti (tests/main.rs) and gpumeter-recording
// (tests/main.rs), each of which `include!`s it: the helpers that build buffers from the
// layout tables and read decoded records back.

/// 2025-07-18T08:08:05Z in ns.
const T0: u64 = 1_752_826_085_000_000_000;

// ------------------------------------------------------------------------------------------
// Helpers: building buffers from the layout tables, and reading decoded records back as raw
// header fields.

/// Builds a buffer record by record, setting fields by their CUPTI header names through the
/// crate's own layout tables.
struct Buf {
    api: ApiVersion,
    bytes: Vec<u8>,
}

impl Buf {
    fn new(api: ApiVersion) -> Self {
        Buf {
            api,
            bytes: Vec::new(),
        }
    }

    /// Appends a zeroed record of `kind` with `fields` (header name, value; the value's low
    /// `width` bytes are written little-endian). Returns the record's offset.
    fn rec(&mut self, kind: ActivityKind, fields: &[(&str, i128)]) -> usize {
        let layout = self
            .api
            .layouts()
            .into_iter()
            .find(|l| l.kind == kind)
            .unwrap_or_else(|| panic!("{} has no {kind}", self.api));
        let at = self.bytes.len();
        self.bytes.resize(at + layout.size, 0);
        self.bytes[at..at + 4].copy_from_slice(&kind.0.to_le_bytes());
        for (name, value) in fields {
            let f = layout
                .fields
                .iter()
                .find(|f| f.name == *name)
                .unwrap_or_else(|| panic!("{} has no field {name}", layout.struct_name));
            let le = value.to_le_bytes();
            self.bytes[at + f.offset..at + f.offset + f.width].copy_from_slice(&le[..f.width]);
        }
        at
    }

    fn kernel(&mut self, start: u64, end: u64, grid_x: i32, corr: u32) -> usize {
        self.rec(
            ActivityKind::CONCURRENT_KERNEL,
            &[
                ("start", start.into()),
                ("end", end.into()),
                ("gridX", grid_x.into()),
                ("gridY", 1),
                ("gridZ", 1),
                ("blockX", 128),
                ("blockY", 1),
                ("blockZ", 1),
                ("correlationId", corr.into()),
                ("contextId", 1),
                ("streamId", 7),
            ],
        )
    }
}

trait Le {
    fn le_bytes(&self) -> Vec<u8>;
}
macro_rules! le_int {
    ($($t:ty),*) => {$(impl Le for $t { fn le_bytes(&self) -> Vec<u8> { self.to_le_bytes().to_vec() } })*};
}
le_int!(u8, u16, u32, u64, i32, i64);
impl Le for bool {
    fn le_bytes(&self) -> Vec<u8> {
        vec![u8::from(*self)]
    }
}
impl Le for [u8; 16] {
    fn le_bytes(&self) -> Vec<u8> {
        self.to_vec()
    }
}

/// Every decoded field of a record as (header member name, little-endian bytes of the
/// member's width): the inverse of decoding, to compare with what was written.
fn fields_of(kind: ActivityKind, rec: &Record) -> Vec<(&'static str, Vec<u8>)> {
    let mut v: Vec<(&'static str, Vec<u8>)> = vec![("kind", kind.0.le_bytes())];
    macro_rules! put {
        ($($name:literal => $val:expr),* $(,)?) => {{ $(v.push(($name, Le::le_bytes(&$val)));)* }};
    }
    match rec {
        Record::Kernel(k) => {
            put!("registersPerThread" => k.registers_per_thread, "start" => k.start,
                 "end" => k.end, "completed" => k.completed, "deviceId" => k.device_id,
                 "contextId" => k.context_id, "streamId" => k.stream_id,
                 "gridX" => k.grid[0], "gridY" => k.grid[1], "gridZ" => k.grid[2],
                 "blockX" => k.block[0], "blockY" => k.block[1], "blockZ" => k.block[2],
                 "staticSharedMemory" => k.static_shared_memory,
                 "dynamicSharedMemory" => k.dynamic_shared_memory,
                 "localMemoryPerThread" => k.local_memory_per_thread,
                 "correlationId" => k.correlation_id, "gridId" => k.grid_id,
                 "name" => k.name_ptr, "queued" => k.queued, "submitted" => k.submitted,
                 "launchType" => k.launch_type,
                 "sharedMemoryExecuted" => k.shared_memory_executed,
                 "graphNodeId" => k.graph_node_id, "graphId" => k.graph_id,
                 "clusterX" => k.cluster[0], "clusterY" => k.cluster[1],
                 "clusterZ" => k.cluster[2]);
            if let Some(d) = k.is_device_launched {
                put!("isDeviceLaunched" => d);
            }
        }
        Record::Memcpy(m) => {
            put!("copyKind" => m.copy_kind, "srcKind" => m.src_kind, "dstKind" => m.dst_kind,
                 "flags" => m.flags, "bytes" => m.bytes, "start" => m.start, "end" => m.end,
                 "deviceId" => m.device_id, "contextId" => m.context_id,
                 "streamId" => m.stream_id, "correlationId" => m.correlation_id,
                 "runtimeCorrelationId" => m.runtime_correlation_id,
                 "graphNodeId" => m.graph_node_id, "graphId" => m.graph_id,
                 "copyCount" => m.copy_count);
            if let Some(d) = m.is_device_launched {
                put!("isDeviceLaunched" => d);
            }
        }
        Record::PeerCopy(p) => {
            put!("copyKind" => p.copy_kind, "srcKind" => p.src_kind, "dstKind" => p.dst_kind,
                 "flags" => p.flags, "bytes" => p.bytes, "start" => p.start, "end" => p.end,
                 "deviceId" => p.device_id, "contextId" => p.context_id,
                 "streamId" => p.stream_id, "srcDeviceId" => p.src_device_id,
                 "srcContextId" => p.src_context_id, "dstDeviceId" => p.dst_device_id,
                 "dstContextId" => p.dst_context_id, "correlationId" => p.correlation_id,
                 "graphNodeId" => p.graph_node_id, "graphId" => p.graph_id);
        }
        Record::Memset(m) => {
            put!("value" => m.value, "bytes" => m.bytes, "start" => m.start, "end" => m.end,
                 "deviceId" => m.device_id, "contextId" => m.context_id,
                 "streamId" => m.stream_id, "correlationId" => m.correlation_id,
                 "flags" => m.flags, "memoryKind" => m.memory_kind,
                 "graphNodeId" => m.graph_node_id, "graphId" => m.graph_id);
            if let Some(d) = m.is_device_launched {
                put!("isDeviceLaunched" => d);
            }
        }
        Record::Memory(m) => {
            put!("memoryOperationType" => m.operation.raw(), "memoryKind" => m.memory_kind,
                 "correlationId" => m.correlation_id, "address" => m.address,
                 "bytes" => m.bytes, "timestamp" => m.timestamp, "PC" => m.pc,
                 "processId" => m.process_id, "deviceId" => m.device_id,
                 "contextId" => m.context_id, "streamId" => m.stream_id,
                 "name" => m.name_ptr, "isAsync" => m.is_async,
                 "memoryPoolConfig.memoryPoolType" => m.pool_type,
                 "memoryPoolConfig.address" => m.pool_address,
                 "memoryPoolConfig.releaseThreshold" => m.pool_release_threshold,
                 "memoryPoolConfig.pool.size" => m.pool_size,
                 "memoryPoolConfig.utilizedSize" => m.pool_utilized_size,
                 "source" => m.source_ptr);
        }
        Record::Device(d) => {
            put!("flags" => d.flags, "globalMemoryBandwidth" => d.global_memory_bandwidth,
                 "globalMemorySize" => d.global_memory_size,
                 "constantMemorySize" => d.constant_memory_size,
                 "l2CacheSize" => d.l2_cache_size, "numThreadsPerWarp" => d.threads_per_warp,
                 "coreClockRate" => d.core_clock_rate_khz,
                 "numMemcpyEngines" => d.memcpy_engines,
                 "numMultiprocessors" => d.multiprocessors, "maxIPC" => d.max_ipc,
                 "maxWarpsPerMultiprocessor" => d.max_warps_per_sm,
                 "maxBlocksPerMultiprocessor" => d.max_blocks_per_sm,
                 "maxSharedMemoryPerMultiprocessor" => d.max_shared_memory_per_sm,
                 "maxRegistersPerMultiprocessor" => d.max_registers_per_sm,
                 "maxRegistersPerBlock" => d.max_registers_per_block,
                 "maxSharedMemoryPerBlock" => d.max_shared_memory_per_block,
                 "maxThreadsPerBlock" => d.max_threads_per_block,
                 "computeCapabilityMajor" => d.compute_capability_major,
                 "computeCapabilityMinor" => d.compute_capability_minor,
                 "id" => d.id, "eccEnabled" => d.ecc_enabled, "uuid" => d.uuid,
                 "name" => d.name_ptr, "isCudaVisible" => d.is_cuda_visible,
                 "isMigEnabled" => d.is_mig_enabled, "gpuInstanceId" => d.gpu_instance_id,
                 "computeInstanceId" => d.compute_instance_id, "migUuid" => d.mig_uuid,
                 "isNumaNode" => d.is_numa_node, "numaId" => d.numa_id);
            if let Some(n) = d.num_tpcs {
                put!("numTpcs" => n);
            }
        }
        Record::Context(c) => {
            put!("contextId" => c.context_id, "deviceId" => c.device_id,
                 "computeApiKind" => c.compute_api_kind, "nullStreamId" => c.null_stream_id,
                 "parentContextId" => c.parent_context_id,
                 "isGreenContext" => c.is_green_context,
                 "numMultiprocessors" => c.num_multiprocessors, "cigMode" => c.cig_mode);
            if let Some(p) = c.process_id {
                put!("processId" => p);
            }
        }
        Record::Api(a) => {
            put!("cbid" => a.cbid, "start" => a.start, "end" => a.end,
                 "processId" => a.process_id, "threadId" => a.thread_id,
                 "correlationId" => a.correlation_id, "returnValue" => a.return_value);
        }
        Record::ExternalCorrelation(e) => {
            put!("externalKind" => e.external_kind, "externalId" => e.external_id,
                 "correlationId" => e.correlation_id);
        }
        Record::Overhead(o) => {
            put!("overheadKind" => o.overhead_kind, "objectKind" => o.object_kind,
                 "objectId.dcs.deviceId" => o.object_id[0],
                 "objectId.dcs.contextId" => o.object_id[1],
                 "objectId.dcs.streamId" => o.object_id[2], "start" => o.start,
                 "end" => o.end, "correlationId" => o.correlation_id,
                 "overheadData" => o.overhead_data_ptr);
        }
        Record::GraphTrace(g) => {
            put!("correlationId" => g.correlation_id, "start" => g.start, "end" => g.end,
                 "deviceId" => g.device_id, "graphId" => g.graph_id,
                 "contextId" => g.context_id, "streamId" => g.stream_id,
                 "endDeviceId" => g.end_device_id, "endContextId" => g.end_context_id);
        }
        Record::InstructionExecution(i) => {
            put!("flags" => i.flags, "sourceLocatorId" => i.source_locator_id,
                 "correlationId" => i.correlation_id, "functionId" => i.function_id,
                 "pcOffset" => i.pc_offset, "threadsExecuted" => i.threads_executed,
                 "notPredOffThreadsExecuted" => i.not_pred_off_threads_executed,
                 "executed" => i.executed);
        }
        Record::Other(_) => {}
        other => panic!("unexpected record {other:?}"),
    }
    v
}

fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
    }
}

