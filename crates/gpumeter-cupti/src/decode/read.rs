//! Reading one record's fields at its version's offsets: bounds-checked little-endian reads
//! of any alignment, never a pointer dereferenced.

use super::records::*;
use crate::kind::ActivityKind;
use crate::layout::ApiVersion;

/// A read-only view of one record's bytes. Every read is bounds-checked and yields 0 when the
/// field would lie outside the record (which the layout tests rule out).
#[derive(Clone, Copy)]
pub(crate) struct Rec<'a>(pub(crate) &'a [u8]);

impl Rec<'_> {
    fn arr<const N: usize>(self, o: usize) -> [u8; N] {
        self.0
            .get(o..o.saturating_add(N))
            .and_then(|s| <[u8; N]>::try_from(s).ok())
            .unwrap_or([0; N])
    }
    pub(crate) fn u8(self, o: usize) -> u8 {
        self.0.get(o).copied().unwrap_or(0)
    }
    pub(crate) fn u16(self, o: usize) -> u16 {
        u16::from_le_bytes(self.arr(o))
    }
    pub(crate) fn u32(self, o: usize) -> u32 {
        u32::from_le_bytes(self.arr(o))
    }
    pub(crate) fn i32(self, o: usize) -> i32 {
        i32::from_le_bytes(self.arr(o))
    }
    pub(crate) fn u64(self, o: usize) -> u64 {
        u64::from_le_bytes(self.arr(o))
    }
    fn i64(self, o: usize) -> i64 {
        i64::from_le_bytes(self.arr(o))
    }
}

fn flag(v: Option<u8>) -> Option<bool> {
    v.map(|b| b != 0)
}

/// One record of `kind` read at `api`'s offsets: the work records, then the records work is
/// joined with; any other kind is [`Record::Other`].
pub(super) fn decode_record(r: Rec<'_>, kind: ActivityKind, api: ApiVersion) -> Record {
    match kind {
        ActivityKind::KERNEL
        | ActivityKind::CONCURRENT_KERNEL
        | ActivityKind::MEMCPY
        | ActivityKind::MEMCPY2
        | ActivityKind::MEMSET
        | ActivityKind::MEMORY2 => work_record(r, kind, api),
        _ => joined_record(r, kind, api),
    }
}

/// A kernel, memory copy, peer-to-peer copy, memset or memory record.
fn work_record(r: Rec<'_>, kind: ActivityKind, api: ApiVersion) -> Record {
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
        other => Record::Other(other),
    }
}

/// A device, context, API, external-correlation, overhead, graph-trace or
/// instruction-execution record; any other kind is [`Record::Other`].
fn joined_record(r: Rec<'_>, kind: ActivityKind, api: ApiVersion) -> Record {
    let t = api.tables();
    match kind {
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
