//! Field offsets of the records work is joined with or attributed by (devices, contexts, API
//! calls, external correlations, overhead, graph launches, instruction counts) in every version.

use super::FieldInfo;

layout! {
    DeviceLayout {
        kind = "kind": 4,
        flags = "flags": 4,
        global_memory_bandwidth = "globalMemoryBandwidth": 8,
        global_memory_size = "globalMemorySize": 8,
        constant_memory_size = "constantMemorySize": 4,
        l2_cache_size = "l2CacheSize": 4,
        num_threads_per_warp = "numThreadsPerWarp": 4,
        core_clock_rate = "coreClockRate": 4,
        num_memcpy_engines = "numMemcpyEngines": 4,
        num_multiprocessors = "numMultiprocessors": 4,
        max_ipc = "maxIPC": 4,
        max_warps_per_multiprocessor = "maxWarpsPerMultiprocessor": 4,
        max_blocks_per_multiprocessor = "maxBlocksPerMultiprocessor": 4,
        max_shared_memory_per_multiprocessor = "maxSharedMemoryPerMultiprocessor": 4,
        max_registers_per_multiprocessor = "maxRegistersPerMultiprocessor": 4,
        max_registers_per_block = "maxRegistersPerBlock": 4,
        max_shared_memory_per_block = "maxSharedMemoryPerBlock": 4,
        max_threads_per_block = "maxThreadsPerBlock": 4,
        compute_capability_major = "computeCapabilityMajor": 4,
        compute_capability_minor = "computeCapabilityMinor": 4,
        id = "id": 4,
        ecc_enabled = "eccEnabled": 4,
        uuid = "uuid": 16,
        name_ptr = "name": 8,
        is_cuda_visible = "isCudaVisible": 1,
        is_mig_enabled = "isMigEnabled": 1,
        gpu_instance_id = "gpuInstanceId": 4,
        compute_instance_id = "computeInstanceId": 4,
        mig_uuid = "migUuid": 16,
        is_numa_node = "isNumaNode": 4,
        numa_id = "numaId": 4,
    }
    optional {
        num_tpcs = "numTpcs": 4,
    }
}

/// `CUpti_ActivityDevice5` (`cupti_activity.h` of CUDA 12.8 and 13.0): 184 bytes.
pub(crate) const DEVICE5: DeviceLayout = DeviceLayout {
    struct_name: "CUpti_ActivityDevice5",
    size: 184,
    kind: 0,
    flags: 4,
    global_memory_bandwidth: 8,
    global_memory_size: 16,
    constant_memory_size: 24,
    l2_cache_size: 28,
    num_threads_per_warp: 32,
    core_clock_rate: 36,
    num_memcpy_engines: 40,
    num_multiprocessors: 44,
    max_ipc: 48,
    max_warps_per_multiprocessor: 52,
    max_blocks_per_multiprocessor: 56,
    max_shared_memory_per_multiprocessor: 60,
    max_registers_per_multiprocessor: 64,
    max_registers_per_block: 68,
    max_shared_memory_per_block: 72,
    max_threads_per_block: 76,
    compute_capability_major: 104,
    compute_capability_minor: 108,
    id: 112,
    ecc_enabled: 116,
    uuid: 120,
    name_ptr: 136,
    is_cuda_visible: 144,
    is_mig_enabled: 145,
    gpu_instance_id: 152,
    compute_instance_id: 156,
    mig_uuid: 160,
    is_numa_node: 176,
    numa_id: 180,
    num_tpcs: None,
};

/// `CUpti_ActivityDevice6` (`cupti_activity.h` of CUDA 13.4): 192 bytes.
pub(crate) const DEVICE6: DeviceLayout = DeviceLayout {
    struct_name: "CUpti_ActivityDevice6",
    size: 192,
    kind: 0,
    flags: 4,
    global_memory_bandwidth: 8,
    global_memory_size: 16,
    constant_memory_size: 24,
    l2_cache_size: 28,
    num_threads_per_warp: 32,
    core_clock_rate: 36,
    num_memcpy_engines: 40,
    num_multiprocessors: 44,
    max_ipc: 48,
    max_warps_per_multiprocessor: 52,
    max_blocks_per_multiprocessor: 56,
    max_shared_memory_per_multiprocessor: 60,
    max_registers_per_multiprocessor: 64,
    max_registers_per_block: 68,
    max_shared_memory_per_block: 72,
    max_threads_per_block: 76,
    compute_capability_major: 104,
    compute_capability_minor: 108,
    id: 112,
    ecc_enabled: 116,
    uuid: 120,
    name_ptr: 136,
    is_cuda_visible: 144,
    is_mig_enabled: 145,
    gpu_instance_id: 152,
    compute_instance_id: 156,
    mig_uuid: 160,
    is_numa_node: 176,
    numa_id: 180,
    num_tpcs: Some(184),
};

layout! {
    ContextLayout {
        kind = "kind": 4,
        context_id = "contextId": 4,
        device_id = "deviceId": 4,
        compute_api_kind = "computeApiKind": 2,
        null_stream_id = "nullStreamId": 2,
        parent_context_id = "parentContextId": 4,
        is_green_context = "isGreenContext": 1,
        num_multiprocessors = "numMultiprocessors": 2,
        cig_mode = "cigMode": 4,
    }
    optional {
        process_id = "processId": 8,
    }
}

/// `CUpti_ActivityContext3` (`cupti_activity.h` of CUDA 12.8 and 13.0): 32 bytes.
pub(crate) const CONTEXT3: ContextLayout = ContextLayout {
    struct_name: "CUpti_ActivityContext3",
    size: 32,
    kind: 0,
    context_id: 4,
    device_id: 8,
    compute_api_kind: 12,
    null_stream_id: 14,
    parent_context_id: 16,
    is_green_context: 20,
    num_multiprocessors: 22,
    cig_mode: 24,
    process_id: None,
};

/// `CUpti_ActivityContext4` (`cupti_activity.h` of CUDA 13.4): 40 bytes.
pub(crate) const CONTEXT4: ContextLayout = ContextLayout {
    struct_name: "CUpti_ActivityContext4",
    size: 40,
    kind: 0,
    context_id: 4,
    device_id: 8,
    compute_api_kind: 12,
    null_stream_id: 14,
    parent_context_id: 16,
    is_green_context: 20,
    num_multiprocessors: 22,
    cig_mode: 24,
    process_id: Some(32),
};

layout! {
    ApiLayout {
        kind = "kind": 4,
        cbid = "cbid": 4,
        start = "start": 8,
        end = "end": 8,
        process_id = "processId": 4,
        thread_id = "threadId": 4,
        correlation_id = "correlationId": 4,
        return_value = "returnValue": 4,
    }
}

/// `CUpti_ActivityAPI` (`cupti_activity.h` of CUDA 12.8, 13.0 and 13.4): 40 bytes.
pub(crate) const API: ApiLayout = ApiLayout {
    struct_name: "CUpti_ActivityAPI",
    size: 40,
    kind: 0,
    cbid: 4,
    start: 8,
    end: 16,
    process_id: 24,
    thread_id: 28,
    correlation_id: 32,
    return_value: 36,
};

layout! {
    ExternalCorrelationLayout {
        kind = "kind": 4,
        external_kind = "externalKind": 4,
        external_id = "externalId": 8,
        correlation_id = "correlationId": 4,
    }
}

/// `CUpti_ActivityExternalCorrelation` (`cupti_activity.h` of CUDA 12.8, 13.0 and 13.4): 24
/// bytes.
pub(crate) const EXTERNAL_CORRELATION: ExternalCorrelationLayout = ExternalCorrelationLayout {
    struct_name: "CUpti_ActivityExternalCorrelation",
    size: 24,
    kind: 0,
    external_kind: 4,
    external_id: 8,
    correlation_id: 16,
};

layout! {
    OverheadLayout {
        kind = "kind": 4,
        overhead_kind = "overheadKind": 4,
        object_kind = "objectKind": 4,
        object_id_0 = "objectId.dcs.deviceId": 4,
        object_id_1 = "objectId.dcs.contextId": 4,
        object_id_2 = "objectId.dcs.streamId": 4,
        start = "start": 8,
        end = "end": 8,
        correlation_id = "correlationId": 4,
        overhead_data_ptr = "overheadData": 8,
    }
}

/// `CUpti_ActivityOverhead3` (`cupti_activity.h` of CUDA 12.8, 13.0 and 13.4): 56 bytes.
pub(crate) const OVERHEAD3: OverheadLayout = OverheadLayout {
    struct_name: "CUpti_ActivityOverhead3",
    size: 56,
    kind: 0,
    overhead_kind: 4,
    object_kind: 8,
    object_id_0: 12,
    object_id_1: 16,
    object_id_2: 20,
    start: 24,
    end: 32,
    correlation_id: 40,
    overhead_data_ptr: 48,
};

layout! {
    GraphTraceLayout {
        kind = "kind": 4,
        correlation_id = "correlationId": 4,
        start = "start": 8,
        end = "end": 8,
        device_id = "deviceId": 4,
        graph_id = "graphId": 4,
        context_id = "contextId": 4,
        stream_id = "streamId": 4,
        end_device_id = "endDeviceId": 4,
        end_context_id = "endContextId": 4,
    }
}

/// `CUpti_ActivityGraphTrace2` (`cupti_activity.h` of CUDA 12.8, 13.0 and 13.4): 56 bytes.
pub(crate) const GRAPH_TRACE2: GraphTraceLayout = GraphTraceLayout {
    struct_name: "CUpti_ActivityGraphTrace2",
    size: 56,
    kind: 0,
    correlation_id: 4,
    start: 8,
    end: 16,
    device_id: 24,
    graph_id: 28,
    context_id: 32,
    stream_id: 36,
    end_device_id: 48,
    end_context_id: 52,
};

layout! {
    InstructionExecutionLayout {
        kind = "kind": 4,
        flags = "flags": 4,
        source_locator_id = "sourceLocatorId": 4,
        correlation_id = "correlationId": 4,
        function_id = "functionId": 4,
        pc_offset = "pcOffset": 4,
        threads_executed = "threadsExecuted": 8,
        not_pred_off_threads_executed = "notPredOffThreadsExecuted": 8,
        executed = "executed": 4,
    }
}

/// `CUpti_ActivityInstructionExecution` (`cupti_activity.h` of CUDA 12.8, 13.0 and 13.4): 48
/// bytes (13.0 and later never emit it: the kind is unsupported there).
pub(crate) const INSTRUCTION_EXECUTION: InstructionExecutionLayout = InstructionExecutionLayout {
    struct_name: "CUpti_ActivityInstructionExecution",
    size: 48,
    kind: 0,
    flags: 4,
    source_locator_id: 8,
    correlation_id: 12,
    function_id: 16,
    pc_offset: 20,
    threads_executed: 24,
    not_pred_off_threads_executed: 32,
    executed: 40,
};
