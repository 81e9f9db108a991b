//! Integration tests of gpumeter-cupti: crafted buffers for every decoded kind in every API
//! version, the C cross-check against the real CUPTI header structs (and libcupti 12.8's and
//! 13.0's own walk), buffers libcupti recorded on a GPU, metering, and the `.gmr` format.

use std::collections::{BTreeMap, BTreeSet};

use gpumeter_core::{DeviceSlot, Meter, MeterConfig, MeterKind, PmSample, TenantMap, UsageReport};
use gpumeter_cupti::gmr::{
    read_gmr, AttributionEvent, AttributionKind, DroppedRecords, EnergySample, Frame, GmrDevice,
    GmrError, GmrHeader, GmrWriter, StringTable, TornReason, GMR_PREAMBLE_LEN,
};
use gpumeter_cupti::gmr::{
    Damage, FunctionInstructions, InstructionCounts, LocatedFrame, PmSamples,
};
use gpumeter_cupti::{
    decode, meter_buffer, meter_gmr, ActivityKind, ApiVersion, CuptiOptions, CuptiSourceError,
    DecodeError, Record,
};

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

/// Header members decoded as `bool`: a crafted value for them must be 0 or 1.
const BOOL_FIELDS: [&str; 4] = [
    "isCudaVisible",
    "isMigEnabled",
    "isGreenContext",
    "isDeviceLaunched",
];

fn meter() -> Meter {
    Meter::new(MeterConfig::default())
}

fn finish(m: Meter) -> UsageReport {
    match m.finish() {
        Ok(r) => r,
        Err(e) => panic!("report: {e}"),
    }
}

/// Asserts that the report has a warning containing `needle`.
fn assert_warns(r: &UsageReport, needle: &str) {
    assert!(
        r.warnings.iter().any(|w| w.contains(needle)),
        "no warning with `{needle}`: {:?}",
        r.warnings
    );
}

fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
    }
}

// ------------------------------------------------------------------------------------------

mod crafted {
    use super::*;

    /// Every decoded field of every decoded kind, in every version, written at its table
    /// offset with a distinct byte pattern, decodes to exactly those bytes; and the decoded
    /// structs cover exactly the table's fields.
    #[test]
    fn every_decoded_field_round_trips() {
        for api in ApiVersion::ALL {
            for layout in api.layouts() {
                if layout.fields.is_empty() {
                    continue;
                }
                let mut bytes = vec![0u8; layout.size];
                let mut want: BTreeMap<&str, Vec<u8>> = BTreeMap::new();
                for (i, f) in layout.fields.iter().enumerate() {
                    let pattern: Vec<u8> = if f.name == "kind" {
                        layout.kind.0.to_le_bytes().to_vec()
                    } else if BOOL_FIELDS.contains(&f.name) {
                        vec![1]
                    } else {
                        (0..f.width).map(|j| (17 * i + j + 1) as u8).collect()
                    };
                    bytes[f.offset..f.offset + f.width].copy_from_slice(&pattern);
                    want.insert(f.name, pattern);
                }
                let d = ok(decode(&bytes, api));
                assert_eq!(d.records.len(), 1, "{api} {}", layout.struct_name);
                let got: BTreeMap<&str, Vec<u8>> = fields_of(layout.kind, &d.records[0].record)
                    .into_iter()
                    .collect();
                assert_eq!(got, want, "{api} {} ({})", layout.struct_name, layout.kind);
            }
        }
    }

    /// A buffer with one record of every kind each version defines walks with the table
    /// sizes; undecoded kinds are stepped over and counted by name.
    #[test]
    fn every_kind_walks_and_unknown_ones_are_counted() {
        for api in ApiVersion::ALL {
            let mut b = Buf::new(api);
            let mut offsets = Vec::new();
            for l in api.layouts() {
                offsets.push((l.kind, b.rec(l.kind, &[])));
            }
            let d = ok(decode(&b.bytes, api));
            let got: Vec<_> = d.records.iter().map(|r| (r.kind, r.offset)).collect();
            assert_eq!(got, offsets, "{api}");
            assert_eq!(d.skipped.get("marker"), Some(&1), "{api}");
            assert_eq!(d.skipped.get("jit"), Some(&1), "{api}");
            assert_eq!(d.skipped.get("concurrent_kernel"), None, "{api}");
            let undecoded = d
                .records
                .iter()
                .filter(|r| matches!(r.record, Record::Other(_)))
                .count() as u64;
            assert_eq!(d.skipped.values().sum::<u64>(), undecoded);
            assert_eq!(d.trailing_zero_bytes, 0);
        }
    }

    #[test]
    fn api_versions() {
        assert_eq!(
            ok(ApiVersion::from_cupti(26)).cupti_api_version(),
            26,
            "12.8"
        );
        assert_eq!(ok(ApiVersion::from_cupti(130_001)), ApiVersion::Cupti13_0);
        // 13.0 GA (130000) emits the same structs as 13.0 Update 1.
        assert_eq!(ok(ApiVersion::from_cupti(130_000)), ApiVersion::Cupti13_0);
        assert_eq!(ok(ApiVersion::from_cupti(130_401)), ApiVersion::Cupti13_4);
        for n in [0, 24, 27, 28, 130_002, 130_100, 130_400, 130_402, 140_000] {
            assert_eq!(
                ApiVersion::from_cupti(n),
                Err(DecodeError::UnsupportedApiVersion(n))
            );
        }
        assert_eq!(ApiVersion::default(), ApiVersion::Cupti12_8);
        for api in ApiVersion::ALL {
            assert_eq!(ok(ApiVersion::from_cupti(api.cupti_api_version())), api);
        }
        assert_eq!(
            ApiVersion::ALL.map(|a| a.to_string()),
            [
                "CUPTI 12.8 (API 26)",
                "CUPTI 13.0 (API 130001)",
                "CUPTI 13.4 (API 130401)"
            ]
        );
        // The struct choices of the issue.
        let k = ActivityKind::CONCURRENT_KERNEL;
        assert_eq!(
            ApiVersion::Cupti12_8.struct_name(k),
            Some("CUpti_ActivityKernel9")
        );
        assert_eq!(
            ApiVersion::Cupti13_0.struct_name(k),
            Some("CUpti_ActivityKernel10")
        );
        assert_eq!(
            ApiVersion::Cupti13_4.struct_name(k),
            Some("CUpti_ActivityKernel13")
        );
        assert_eq!(ApiVersion::Cupti12_8.record_size(k), Some(208));
        assert_eq!(ApiVersion::Cupti13_0.record_size(k), Some(216));
        assert_eq!(ApiVersion::Cupti13_4.record_size(k), Some(248));
        // 13.0's structs per kind where they differ from 12.8's or 13.4's.
        let s13_0 = |k: u32| {
            let k = ActivityKind(k);
            (
                ApiVersion::Cupti13_0.struct_name(k),
                ApiVersion::Cupti13_0.record_size(k),
            )
        };
        assert_eq!(s13_0(1), (Some("CUpti_ActivityMemcpy6"), Some(96)));
        assert_eq!(s13_0(2), (Some("CUpti_ActivityMemset4"), Some(88)));
        assert_eq!(s13_0(8), (Some("CUpti_ActivityDevice5"), Some(184)));
        assert_eq!(s13_0(9), (Some("CUpti_ActivityContext3"), Some(32)));
        assert_eq!(s13_0(13), (Some("CUpti_ActivityMarkerData2"), Some(40)));
        assert_eq!(s13_0(40), (Some("CUpti_ActivityNvLink4"), Some(136)));
        assert_eq!(s13_0(50), (Some("CUpti_ActivityMemoryPool3"), Some(80)));
        assert_eq!(s13_0(52), (Some("CUpti_ActivityJit2"), Some(72)));
        assert_eq!(
            s13_0(55),
            (Some("CUpti_ActivityConfidentialComputeRotation"), Some(32))
        );
        assert_eq!(s13_0(56), (None, None));
        assert_eq!(
            ApiVersion::Cupti12_8.record_size(ActivityKind::GREEN_CONTEXT),
            None
        );
        assert_eq!(
            ApiVersion::Cupti13_0.record_size(ActivityKind::GREEN_CONTEXT),
            None
        );
    }

    #[test]
    fn truncated_record_names_its_offset() {
        for api in ApiVersion::ALL {
            let mut b = Buf::new(api);
            b.kernel(T0, T0 + 10, 1, 1);
            let last = b.rec(ActivityKind::MEMSET, &[("bytes", 4)]);
            let size = b.bytes.len() - last;
            for cut in last + 1..b.bytes.len() {
                let e = decode(&b.bytes[..cut], api);
                let want = if cut - last < 4 {
                    // Not even the kind fits; its bytes are non-zero, so not a zeroed tail.
                    DecodeError::Truncated {
                        offset: last,
                        kind: None,
                        needed: 4,
                        available: cut - last,
                    }
                } else {
                    DecodeError::Truncated {
                        offset: last,
                        kind: Some(ActivityKind::MEMSET),
                        needed: size,
                        available: cut - last,
                    }
                };
                assert_eq!(e, Err(want), "{api} cut at {cut}");
            }
            let msg = match decode(&b.bytes[..b.bytes.len() - 1], api) {
                Err(e) => e.to_string(),
                Ok(_) => panic!("decoded a truncated buffer"),
            };
            assert!(msg.contains(&format!("byte {last}")), "{msg}");
            assert!(msg.contains("MEMSET"), "{msg}");
        }
    }

    #[test]
    fn any_alignment_decodes_the_same() {
        for api in ApiVersion::ALL {
            let mut b = Buf::new(api);
            b.rec(ActivityKind::DEVICE, &[("numMultiprocessors", 132)]);
            b.kernel(T0, T0 + 100, 264, 5);
            b.rec(
                ActivityKind::MEMCPY,
                &[("bytes", 1 << 40), ("start", T0.into())],
            );
            let want = ok(decode(&b.bytes, api));
            for pad in 1..8 {
                let mut v = vec![0xEEu8; pad];
                v.extend_from_slice(&b.bytes);
                assert_eq!(ok(decode(&v[pad..], api)), want, "{api} pad {pad}");
            }
        }
    }

    #[test]
    fn unknown_and_invalid_kinds() {
        let api = ApiVersion::Cupti12_8;
        let mut b = Buf::new(api);
        b.kernel(T0, T0 + 1, 1, 1);
        let at = b.bytes.len();
        // A 13.x-only kind in a 12.8 buffer: its size is unknown there.
        b.bytes.extend_from_slice(&59u32.to_le_bytes());
        b.bytes.extend_from_slice(&[0; 60]);
        assert_eq!(
            decode(&b.bytes, api),
            Err(DecodeError::UnknownKind {
                offset: at,
                kind: 59,
                api
            })
        );
        // 13.0 ends at CONFIDENTIAL_COMPUTE_ROTATION (55): 56 and 59 are unknown there too.
        let mut b130 = Buf::new(ApiVersion::Cupti13_0);
        b130.rec(ActivityKind(55), &[]);
        let at130 = b130.bytes.len();
        for k in [56u32, 59] {
            let mut bytes = b130.bytes.clone();
            bytes.extend_from_slice(&k.to_le_bytes());
            bytes.extend_from_slice(&[0; 300]);
            assert_eq!(
                decode(&bytes, ApiVersion::Cupti13_0),
                Err(DecodeError::UnknownKind {
                    offset: at130,
                    kind: k,
                    api: ApiVersion::Cupti13_0
                })
            );
        }
        let d = ok(decode(&b130.bytes, ApiVersion::Cupti13_0));
        assert_eq!(d.skipped.get("confidential_compute_rotation"), Some(&1));
        // The same kind is a GREEN_CONTEXT record in 13.4, stepped over and counted.
        let mut b13 = Buf::new(ApiVersion::Cupti13_4);
        b13.rec(ActivityKind::GREEN_CONTEXT, &[]);
        let d = ok(decode(&b13.bytes, ApiVersion::Cupti13_4));
        assert_eq!(d.skipped.get("green_context"), Some(&1));
        // A kind no release defines.
        let mut bad = 0x7fff_ffffu32.to_le_bytes().to_vec();
        bad.extend_from_slice(&[0; 36]);
        assert!(matches!(
            decode(&bad, ApiVersion::Cupti13_4),
            Err(DecodeError::UnknownKind {
                offset: 0,
                kind: 0x7fff_ffff,
                ..
            })
        ));
        // Kind 0 followed by zeros: the unused tail of a whole buffer.
        let mut tail = b.bytes[..at].to_vec();
        tail.extend_from_slice(&[0; 1000]);
        let d = ok(decode(&tail, api));
        assert_eq!((d.records.len(), d.trailing_zero_bytes), (1, 1000));
        tail.extend_from_slice(&[0, 0, 0]);
        assert_eq!(ok(decode(&tail, api)).trailing_zero_bytes, 1003);
        // Kind 0 followed by something else: an error.
        let mut junk = b.bytes[..at].to_vec();
        junk.extend_from_slice(&[0, 0, 0, 0, 1]);
        assert_eq!(
            decode(&junk, api),
            Err(DecodeError::InvalidKind { offset: at })
        );
        assert_eq!(ok(decode(&[], api)).records.len(), 0);
    }

    #[test]
    fn device_uuid_keys() {
        let api = ApiVersion::Cupti13_4;
        let mut b = Buf::new(api);
        let uuid = i128::from_le_bytes([
            0x74, 0xe1, 0x28, 0xb2, 0x90, 0xb6, 0xb4, 0x09, 0x07, 0xc8, 0x33, 0xbe, 0xe5, 0xff,
            0x6f, 0x88,
        ]);
        b.rec(ActivityKind::DEVICE, &[("uuid", uuid)]);
        b.rec(
            ActivityKind::DEVICE,
            &[("uuid", uuid), ("isMigEnabled", 1), ("migUuid", 0x11)],
        );
        b.rec(ActivityKind::DEVICE, &[]);
        let d = ok(decode(&b.bytes, api));
        let keys: Vec<Option<String>> = d
            .records
            .iter()
            .map(|r| match &r.record {
                Record::Device(d) => d.uuid_key(),
                _ => panic!(),
            })
            .collect();
        assert_eq!(
            keys,
            [
                Some("GPU-74e128b2-90b6-b409-07c8-33bee5ff6f88".to_string()),
                Some("MIG-11000000-0000-0000-0000-000000000000".to_string()),
                None
            ]
        );
    }
}

// ------------------------------------------------------------------------------------------

mod cross_check {
    //! The C helper (`tests/c/make_buffers.c`) compiled against each wheel's real headers is
    //! the oracle: its `offsetof`/`sizeof`, its buffers and its expected values; and, for 12.8
    //! and 13.0 (whose libcupti walks buffers without a GPU or driver), libcupti's own
    //! `cuptiActivityGetNextRecord`: its record size for every kind value, and its walk of the
    //! same buffers.
    //!
    //! Headers come from `CUPTI12_INCLUDE`, `CUDA12_INCLUDE`, `CUDA12_CRT_INCLUDE`,
    //! `CUPTI12_LIB` (and the `13` variants for 13.4, the `130` ones for 13.0), as
    //! `bindings/cupti/fetch-wheels.sh` writes them into `bindings/cupti/.wheels/env.sh`, else
    //! from that `.wheels` folder's fixed layout. Missing headers or compiler, for any version:
    //! a notice, or a failure under `CI=true`.

    use super::*;
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::sync::OnceLock;

    struct Toolchain {
        includes: Vec<PathBuf>,
        lib: Option<PathBuf>,
    }

    fn wheels() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bindings/cupti/.wheels")
    }

    fn env_path(name: &str) -> Option<PathBuf> {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    }

    fn toolchain(api: ApiVersion) -> Result<Toolchain, String> {
        // The suffix of the env.sh variables and the folder under `.wheels` of each version.
        let (n, dir) = match api {
            ApiVersion::Cupti12_8 => ("12", "cu12"),
            ApiVersion::Cupti13_0 => ("130", "cu130"),
            ApiVersion::Cupti13_4 => ("13", "cu13"),
            other => return Err(format!("no CUPTI wheel is pinned for {other}")),
        };
        let lib_name = match api {
            ApiVersion::Cupti12_8 => "libcupti.so.12",
            _ => "libcupti.so.13",
        };
        let w = wheels().join(dir);
        let (cupti, cuda, crt, lib) = match api {
            ApiVersion::Cupti12_8 => (
                w.join("nvidia/cuda_cupti/include"),
                w.join("nvidia/cuda_runtime/include"),
                w.join("nvidia/cuda_nvcc/include"),
                w.join("nvidia/cuda_cupti/lib"),
            ),
            _ => (
                w.join("nvidia/cu13/include"),
                w.join("nvidia/cu13/include"),
                w.join("nvidia/cu13/include"),
                w.join("nvidia/cu13/lib"),
            ),
        };
        let cupti = env_path(&format!("CUPTI{n}_INCLUDE")).unwrap_or(cupti);
        let cuda = env_path(&format!("CUDA{n}_INCLUDE")).unwrap_or(cuda);
        let crt = env_path(&format!("CUDA{n}_CRT_INCLUDE")).unwrap_or(crt);
        let lib = env_path(&format!("CUPTI{n}_LIB")).unwrap_or(lib);
        if !cupti.join("cupti.h").is_file() {
            return Err(format!(
                "CUPTI {} headers not found ({}); run bindings/cupti/fetch-wheels.sh and \
                 source bindings/cupti/.wheels/env.sh",
                api.cuda_release(),
                cupti.display()
            ));
        }
        if !cuda.join("cuda.h").is_file() {
            return Err(format!("cuda.h not found in {}", cuda.display()));
        }
        let lib = if lib.is_dir() {
            lib.join(lib_name)
        } else {
            lib
        };
        Ok(Toolchain {
            includes: vec![cupti, cuda, crt],
            lib: lib.is_file().then_some(lib),
        })
    }

    /// Compiles the helper for `api` once per test run; `Err` says why it cannot be.
    fn helper(api: ApiVersion) -> Result<PathBuf, String> {
        static HELPERS: [OnceLock<Result<PathBuf, String>>; ApiVersion::ALL.len()] =
            [const { OnceLock::new() }; ApiVersion::ALL.len()];
        let Some(i) = ApiVersion::ALL.iter().position(|&a| a == api) else {
            return Err(format!("{api} is not in ApiVersion::ALL"));
        };
        HELPERS[i]
            .get_or_init(|| {
                let tc = toolchain(api)?;
                let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/make_buffers.c");
                let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
                    .join(format!("make_buffers_{}", api.cupti_api_version()));
                let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
                let mut cmd = Command::new(&cc);
                cmd.args(["-std=gnu11", "-O1", "-Wall", "-Wextra", "-Werror"]);
                for i in &tc.includes {
                    cmd.arg("-I").arg(i);
                }
                cmd.arg("-o").arg(&out).arg(&src).arg("-ldl");
                let o = cmd
                    .output()
                    .map_err(|e| format!("cannot run the C compiler `{cc}`: {e}"))?;
                if !o.status.success() {
                    return Err(format!(
                        "compiling {} failed:\n{}",
                        src.display(),
                        String::from_utf8_lossy(&o.stderr)
                    ));
                }
                Ok(out)
            })
            .clone()
    }

    /// The helper, or `None` after a notice (a panic under `CI=true`).
    fn helper_or_skip(api: ApiVersion) -> Option<PathBuf> {
        match helper(api) {
            Ok(p) => Some(p),
            Err(why) => {
                skip(&why);
                None
            }
        }
    }

    fn skip(why: &str) {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{why} (CI=true: the cross-check must run)");
        }
        {
            // Straight to stderr, past the test harness's capture: a skip is never silent.
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "skipped: the C cross-check: {why}");
        }
    }

    fn run(helper: &Path, args: &[&std::ffi::OsStr]) -> String {
        let o = match Command::new(helper).args(args).output() {
            Ok(o) => o,
            Err(e) => panic!("running {}: {e}", helper.display()),
        };
        assert!(
            o.status.success(),
            "{} {:?} failed: {}",
            helper.display(),
            args,
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn tmp(name: &str) -> PathBuf {
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
    }

    /// One `record`/`walk` line: kind, offset, and `name=value` pairs in order.
    pub(super) type Line = (u32, usize, Vec<(String, String)>);

    pub(super) fn parse_lines(text: &str, tag: &str) -> Vec<Line> {
        let mut out = Vec::new();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            if words.next() != Some(tag) {
                continue;
            }
            let mut kind = None;
            let mut offset = None;
            let mut fields = Vec::new();
            for w in words {
                let Some((k, v)) = w.split_once('=') else {
                    panic!("bad word {w:?} in {line:?}")
                };
                match k {
                    "kind" => kind = v.parse().ok(),
                    "offset" => offset = v.parse().ok(),
                    _ => fields.push((k.to_string(), v.to_string())),
                }
            }
            match (kind, offset) {
                (Some(k), Some(o)) => out.push((k, o, fields)),
                _ => panic!("no kind/offset in {line:?}"),
            }
        }
        out
    }

    /// The little-endian bytes a C-printed value stands for, at the field's width.
    fn value_bytes(value: &str, width: usize) -> Vec<u8> {
        if width == 16 {
            return ok(hex::decode(value));
        }
        let n: i128 = match value.parse() {
            Ok(n) => n,
            Err(e) => panic!("value {value:?}: {e}"),
        };
        n.to_le_bytes()[..width].to_vec()
    }

    /// Compares decoded records with C lines field by field; returns the number of fields
    /// compared.
    pub(super) fn agree(api: ApiVersion, buf: &[u8], lines: &[Line], what: &str) -> usize {
        let d = ok(decode(buf, api));
        assert_eq!(d.records.len(), lines.len(), "{api} {what}: record count");
        let layouts = api.layouts();
        let mut compared = 0;
        for (rec, (kind, offset, fields)) in d.records.iter().zip(lines) {
            assert_eq!(
                (rec.kind.0, rec.offset),
                (*kind, *offset),
                "{api} {what}: kind/offset"
            );
            let layout = layouts
                .iter()
                .find(|l| l.kind == rec.kind)
                .unwrap_or_else(|| panic!("no layout for {}", rec.kind));
            let ours: BTreeMap<&str, Vec<u8>> =
                fields_of(rec.kind, &rec.record).into_iter().collect();
            for (name, value) in fields {
                let f = layout
                    .fields
                    .iter()
                    .find(|f| f.name == name)
                    .unwrap_or_else(|| {
                        panic!("{api} {what}: {} has no field {name}", layout.struct_name)
                    });
                let got = ours.get(name.as_str()).unwrap_or_else(|| {
                    panic!("{api} {what}: decoder gives no {name} for {}", rec.kind)
                });
                assert_eq!(
                    got,
                    &value_bytes(value, f.width),
                    "{api} {what}: {} at {offset}: field {name} (C says {value})",
                    rec.kind
                );
                compared += 1;
            }
        }
        compared
    }

    /// Our tables against the headers' `offsetof`/`sizeof`, for every kind (its struct and
    /// size) and every decoded field, in every version.
    #[test]
    fn layouts_match_the_headers() {
        for api in ApiVersion::ALL {
            let Some(h) = helper_or_skip(api) else {
                continue;
            };
            let text = run(&h, &["layouts".as_ref()]);
            let mut sizes: BTreeMap<u32, (String, usize)> = BTreeMap::new();
            let mut fields: BTreeSet<(String, String, usize, usize)> = BTreeSet::new();
            let mut count = 0u32;
            for line in text.lines() {
                let w: Vec<&str> = line.split_whitespace().collect();
                match w.as_slice() {
                    ["api", n] => assert_eq!(n.parse::<u32>().ok(), Some(api.cupti_api_version())),
                    ["size", k, st, s] => {
                        sizes.insert(ok(k.parse()), (st.to_string(), ok(s.parse())));
                    }
                    ["field", st, f, o, s] => {
                        fields.insert((
                            st.to_string(),
                            f.to_string(),
                            ok(o.parse()),
                            ok(s.parse()),
                        ));
                    }
                    ["count", n] => count = ok(n.parse()),
                    _ => panic!("unexpected line {line:?}"),
                }
            }
            let ours: BTreeMap<u32, (String, usize)> = api
                .layouts()
                .iter()
                .map(|l| (l.kind.0, (l.struct_name.to_string(), l.size)))
                .collect();
            assert_eq!(ours, sizes, "{api}: record structs and sizes per kind");
            assert_eq!(
                count as usize,
                sizes.len() + 1,
                "{api}: CUPTI_ACTIVITY_KIND_COUNT"
            );
            let mut ours_f = BTreeSet::new();
            for l in api.layouts() {
                for f in &l.fields {
                    ours_f.insert((
                        l.struct_name.to_string(),
                        f.name.to_string(),
                        f.offset,
                        f.width,
                    ));
                }
            }
            let only_ours: Vec<_> = ours_f.difference(&fields).collect();
            let only_c: Vec<_> = fields.difference(&ours_f).collect();
            assert!(
                only_ours.is_empty() && only_c.is_empty(),
                "{api}: field tables differ from the headers:\n ours only: {only_ours:?}\n headers only: {only_c:?}"
            );
            eprintln!(
                "{api}: {} kinds, {} fields agree with the headers",
                sizes.len(),
                fields.len()
            );
        }
    }

    /// Buffers of real header structs (every decoded kind, plus skipped ones) decode to the
    /// values the C helper set, field by field, in every version.
    #[test]
    fn crafted_buffers_agree_field_by_field() {
        for api in ApiVersion::ALL {
            let Some(h) = helper_or_skip(api) else {
                continue;
            };
            let v = api.cupti_api_version();
            let (bin, exp) = (tmp(&format!("buf_{v}.bin")), tmp(&format!("exp_{v}.txt")));
            run(&h, &["buffer".as_ref(), bin.as_os_str(), exp.as_os_str()]);
            let buf = ok(std::fs::read(&bin));
            let text = ok(std::fs::read_to_string(&exp));
            assert_eq!(text.lines().next(), Some(format!("api {v}").as_str()));
            let lines = parse_lines(&text, "record");
            let kinds: BTreeSet<u32> = lines.iter().map(|l| l.0).collect();
            for k in [1, 2, 3, 4, 5, 8, 9, 10, 17, 22, 24, 39, 48, 49, 51] {
                assert!(kinds.contains(&k), "{api}: the C buffer lacks kind {k}");
            }
            let n = agree(api, &buf, &lines, "crafted buffer");
            assert!(n > 250, "{api}: only {n} fields compared");
            eprintln!(
                "{api}: {} records, {n} fields agree with the C structs",
                lines.len()
            );
        }
    }

    /// One zeroed record of every kind of the release, laid out by the C helper with the
    /// headers' `sizeof`, walks to the same kinds and offsets.
    #[test]
    fn every_kind_of_the_release_walks() {
        for api in ApiVersion::ALL {
            let Some(h) = helper_or_skip(api) else {
                continue;
            };
            let bin = tmp(&format!("all_{}.bin", api.cupti_api_version()));
            run(&h, &["allkinds".as_ref(), bin.as_os_str()]);
            let buf = ok(std::fs::read(&bin));
            let d = ok(decode(&buf, api));
            let kinds: Vec<u32> = d.records.iter().map(|r| r.kind.0).collect();
            let want: Vec<u32> = api.layouts().iter().map(|l| l.kind.0).collect();
            assert_eq!(kinds, want, "{api}");
        }
    }

    /// The kinds that libcupti 13.0 and 13.4 refuse in their own walk
    /// (`CUPTI_ERROR_INVALID_KIND`) although their enums still define them: the legacy event,
    /// metric, source-level and PC-sampling kinds that the 13.x headers call "unsupported" from
    /// CUDA 13.0 on (enabling them answers `CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED`). Our
    /// tables keep their header sizes. Seen with libcupti 13.0.85 here and with 13.0.85 and
    /// 13.4.92 on an H200 with driver 580.159.04.
    const REFUSED_BY_LIBCUPTI_13: [u32; 16] =
        [6, 7, 14, 15, 16, 21, 23, 24, 29, 30, 31, 32, 41, 42, 43, 44];

    /// `CUPTI_ERROR_INVALID_KIND`.
    const INVALID_KIND: i64 = 21;

    /// Whether libcupti of `api` walks buffers without a GPU or driver (12.8 and 13.0 do;
    /// 13.4 answers `CUPTI_ERROR_UNKNOWN` to every call there). For these, a libcupti that
    /// cannot be used is a failure under `CI=true`; for the others a notice.
    fn walks_without_driver(api: ApiVersion) -> bool {
        matches!(api, ApiVersion::Cupti12_8 | ApiVersion::Cupti13_0)
    }

    /// The C helper and the libcupti of `api`, or `None` after a notice (a failure under
    /// `CI=true` for the versions that need no driver).
    fn helper_and_libcupti(api: ApiVersion) -> Option<(PathBuf, PathBuf)> {
        let why = match (helper(api), toolchain(api).map(|t| t.lib)) {
            (Ok(h), Ok(Some(lib))) => return Some((h, lib)),
            (Err(e), _) | (_, Err(e)) => e,
            (_, Ok(None)) => format!("libcupti of {api} not found (bindings/cupti/.wheels)"),
        };
        if walks_without_driver(api) {
            skip(&why);
        } else {
            {
                // Straight to stderr, past the test harness's capture: a skip is never silent.
                use std::io::Write as _;
                let _ = writeln!(
                    std::io::stderr(),
                    "skipped: libcupti's walk for {api}: {why}"
                );
            }
        }
        None
    }

    /// libcupti's walk of `buf` through `crates/cupti-sys` (the loader the collector uses):
    /// for 12.8 `GPUMETER_CUPTI_LIB`, else the libcupti of the version's wheel. `None` when it
    /// cannot be loaded or used here; the C helper's `walk` mode (the same libcupti function
    /// through `dlopen`) still runs then, and with `CI=true` the helper itself is required.
    fn libcupti_walk(api: ApiVersion, lib: &Path, buf: &[u8]) -> Option<Vec<(u32, usize)>> {
        let path = match api {
            ApiVersion::Cupti12_8 => std::env::var_os("GPUMETER_CUPTI_LIB")
                .map(PathBuf::from)
                .unwrap_or_else(|| lib.to_path_buf()),
            _ => lib.to_path_buf(),
        };
        let cupti = cupti_sys::Cupti::load_from(&path).ok()?;
        if cupti.version().ok()? != api.cupti_api_version() {
            return None;
        }
        let mut copy = buf.to_vec();
        let len = copy.len();
        let walk = cupti.walk_activity_buffer(&mut copy, len).ok()?;
        assert!(
            !walk.ended_on_invalid_kind,
            "{api}: libcupti stopped on an invalid kind"
        );
        Some(walk.records)
    }

    /// libcupti's own record size of every kind value (the helper's `steps` mode: how far
    /// `cuptiActivityGetNextRecord` steps over a record of that kind) equals our table's size,
    /// for every kind it accepts; the kinds it refuses are the ones our table lacks, plus, for
    /// 13.x, the legacy kinds 13.x no longer emits ([`REFUSED_BY_LIBCUPTI_13`]).
    #[test]
    fn libcupti_record_sizes_match_the_tables() {
        for api in ApiVersion::ALL {
            let Some((h, lib)) = helper_and_libcupti(api) else {
                continue;
            };
            let text = run(&h, &["steps".as_ref(), lib.as_os_str()]);
            let mut sizes: BTreeMap<u32, usize> = BTreeMap::new();
            let mut refused: BTreeMap<u32, i64> = BTreeMap::new();
            for line in text.lines() {
                match line.split_whitespace().collect::<Vec<_>>().as_slice() {
                    ["step", k, "refused", st] => {
                        refused.insert(ok(k.parse()), ok(st.parse()));
                    }
                    ["step", k, size] => {
                        sizes.insert(ok(k.parse()), ok(size.parse()));
                    }
                    _ => panic!("unexpected line {line:?}"),
                }
            }
            if sizes.is_empty() && !walks_without_driver(api) {
                eprintln!(
                    "notice: libcupti of {api} walks nothing here (status {:?}; no driver?)",
                    refused.values().next()
                );
                continue;
            }
            for (&k, &size) in &sizes {
                assert_eq!(
                    api.record_size(ActivityKind(k)),
                    Some(size),
                    "{api}: libcupti steps {size} bytes over kind {}",
                    ActivityKind(k)
                );
            }
            assert!(
                refused.values().all(|&st| st == INVALID_KIND),
                "{api}: {refused:?}"
            );
            let refused_known: BTreeSet<u32> = refused
                .keys()
                .copied()
                .filter(|&k| api.record_size(ActivityKind(k)).is_some())
                .collect();
            let want: BTreeSet<u32> = match api {
                ApiVersion::Cupti12_8 => BTreeSet::new(),
                _ => REFUSED_BY_LIBCUPTI_13.into_iter().collect(),
            };
            assert_eq!(refused_known, want, "{api}: kinds libcupti refuses");
            for l in api.layouts() {
                assert!(
                    sizes.contains_key(&l.kind.0) || refused.contains_key(&l.kind.0),
                    "{api}: {} not probed",
                    l.kind
                );
            }
            eprintln!(
                "{api}: libcupti steps {} kinds by our sizes, refuses {} we know",
                sizes.len(),
                refused_known.len()
            );
        }
    }

    /// The records of `buf` (laid out as the C helper's `lines` say, with the header sizes of
    /// `api`) without those of `kinds`: the buffer libcupti can walk, and its expected lines at
    /// their new offsets.
    fn without_kinds(
        api: ApiVersion,
        buf: &[u8],
        lines: &[Line],
        kinds: &[u32],
    ) -> (Vec<u8>, Vec<Line>) {
        let mut out = Vec::new();
        let mut kept = Vec::new();
        for (kind, offset, fields) in lines {
            let size = api
                .record_size(ActivityKind(*kind))
                .unwrap_or_else(|| panic!("{api}: no size for kind {kind}"));
            if kinds.contains(kind) {
                continue;
            }
            kept.push((*kind, out.len(), fields.clone()));
            out.extend_from_slice(&buf[*offset..*offset + size]);
        }
        (out, kept)
    }

    /// libcupti's `cuptiActivityGetNextRecord` walks both C buffers (the crafted one and one of
    /// every kind) record by record to the same kinds and offsets as our decoder, and the key
    /// fields read through the header structs at libcupti's addresses agree with it; also
    /// through `cupti-sys`. For 13.x, the records of the kinds libcupti 13.x refuses are left
    /// out of the buffers first. Runs for 12.8 and 13.0 (and 13.4 where a driver lets its
    /// libcupti work).
    #[test]
    fn libcupti_walk_agrees() {
        for api in ApiVersion::ALL {
            let Some((h, lib)) = helper_and_libcupti(api) else {
                continue;
            };
            let v = api.cupti_api_version();
            let (bin, exp, all) = (
                tmp(&format!("wbuf_{v}.bin")),
                tmp(&format!("wexp_{v}.txt")),
                tmp(&format!("wall_{v}.bin")),
            );
            run(&h, &["buffer".as_ref(), bin.as_os_str(), exp.as_os_str()]);
            run(&h, &["allkinds".as_ref(), all.as_os_str()]);
            let refused: &[u32] = match api {
                ApiVersion::Cupti12_8 => &[],
                _ => &REFUSED_BY_LIBCUPTI_13,
            };
            let crafted = ok(std::fs::read(&bin));
            let crafted_lines = parse_lines(&ok(std::fs::read_to_string(&exp)), "record");
            let every = ok(std::fs::read(&all));
            let every_lines: Vec<Line> = ok(decode(&every, api))
                .records
                .iter()
                .map(|r| (r.kind.0, r.offset, Vec::new()))
                .collect();
            for (buf, lines, what) in [
                (&crafted, &crafted_lines, "crafted buffer"),
                (&every, &every_lines, "all kinds"),
            ] {
                let (buf, want) = without_kinds(api, buf, lines, refused);
                let path = tmp(&format!("walk_{v}_{}.bin", what.replace(' ', "_")));
                ok(std::fs::write(&path, &buf));
                let text = run(&h, &["walk".as_ref(), lib.as_os_str(), path.as_os_str()]);
                if text.trim() == "end status=999" && !walks_without_driver(api) {
                    eprintln!("notice: libcupti of {api} does not walk here (no driver?)");
                    break;
                }
                // CUPTI_ERROR_MAX_LIMIT_REACHED (12): the walk reached the end of the buffer.
                assert!(
                    text.lines().any(|l| l == "end status=12"),
                    "{api}: libcupti walk of the {what} did not end cleanly:\n{text}"
                );
                let lines = parse_lines(&text, "walk");
                let at: Vec<(u32, usize)> = lines.iter().map(|l| (l.0, l.1)).collect();
                let want_at: Vec<(u32, usize)> = want.iter().map(|l| (l.0, l.1)).collect();
                assert_eq!(at, want_at, "{api}: libcupti walk of the {what}");
                let n = agree(api, &buf, &lines, &format!("libcupti walk of the {what}"));
                let via_cupti_sys = libcupti_walk(api, &lib, &buf).map(|walk| {
                    assert_eq!(walk, want_at, "{api}: cupti-sys walk of the {what}");
                    walk.len()
                });
                if std::env::var("CI").as_deref() == Ok("true") && walks_without_driver(api) {
                    assert!(
                        via_cupti_sys.is_some(),
                        "CI=true: libcupti of {api} must load and walk through cupti-sys"
                    );
                }
                eprintln!(
                    "{api}: libcupti walk of the {what}: {} records, {n} fields agree; \
                     cupti-sys: {via_cupti_sys:?} records agree",
                    lines.len()
                );
            }
        }
    }
}

// ------------------------------------------------------------------------------------------

mod recorded {
    //! Buffers libcupti itself recorded on a GPU machine: `tests/c/record_live.c` run with
    //! libcupti 12.8.90, 13.0.85 and 13.4.92 on an NVIDIA H200 with driver 580.159.04 (CUDA
    //! 13.0, the r580 machines gpumeter meets with PyTorch cu130), a known workload each time.
    //! `tests/c/live/h200_r580_cupti_<api>.bin` holds the completed buffers back to back, and
    //! the `.txt` beside it libcupti's own walk of them on that machine, with key fields read
    //! through the release's header structs. Our decoder must find the same records at the
    //! same offsets, step the same sizes and read the same values: a check of the tables
    //! against what libcupti emits, not only against what its headers declare.

    use super::cross_check::{agree, parse_lines, Line};
    use super::*;

    /// `line` without its ` name_str=…` word (a C string the recorder printed, `"…"` quoted
    /// when it may hold spaces), returned separately.
    fn take_name_str(line: &str) -> (String, Option<String>) {
        let Some(at) = line.find(" name_str=") else {
            return (line.to_string(), None);
        };
        let rest = &line[at + " name_str=".len()..];
        let (value, len) = match rest.strip_prefix('"') {
            Some(q) => {
                let close = q.find('"').unwrap_or(q.len());
                (q[..close].to_string(), (close + 2).min(rest.len()))
            }
            None => {
                let end = rest.find(' ').unwrap_or(rest.len());
                (rest[..end].to_string(), end)
            }
        };
        let mut out = line[..at].to_string();
        out.push_str(&rest[len..]);
        (out, Some(value))
    }

    fn recording(api: ApiVersion) -> (Vec<u8>, String) {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/live");
        let stem = format!("h200_r580_cupti_{}", api.cupti_api_version());
        (
            ok(std::fs::read(dir.join(format!("{stem}.bin")))),
            ok(std::fs::read_to_string(dir.join(format!("{stem}.txt")))),
        )
    }

    #[test]
    fn live_recordings_decode_as_libcupti_walked_them() {
        for api in ApiVersion::ALL {
            let (buf, log) = recording(api);
            let v = api.cupti_api_version();
            assert!(
                log.lines().any(|l| l.starts_with("# libcupti ")
                    && l.contains(&format!("cuptiGetVersion {v};"))),
                "{api}: the recording was not made by libcupti {v}"
            );
            let mut names = Vec::new();
            let text: String = log
                .lines()
                .map(|l| {
                    let (l, name) = take_name_str(l);
                    names.extend(name);
                    l + "\n"
                })
                .collect();
            let walked = parse_lines(&text, "live");
            let d = ok(decode(&buf, api));
            assert_eq!(d.trailing_zero_bytes, 0, "{api}");
            assert_eq!(d.records.len(), walked.len(), "{api}: record count");
            // libcupti's steps are our record sizes.
            let mut lines: Vec<Line> = Vec::new();
            for (rec, (kind, offset, fields)) in d.records.iter().zip(&walked) {
                let size = fields
                    .iter()
                    .find(|(n, _)| n == "size")
                    .map(|(_, s)| ok(s.parse::<usize>()));
                assert_eq!(
                    (rec.kind.0, rec.offset, Some(rec.size)),
                    (*kind, *offset, size),
                    "{api}: record at {offset}"
                );
                let fields = fields
                    .iter()
                    .filter(|(n, _)| n != "size")
                    .cloned()
                    .collect();
                lines.push((*kind, *offset, fields));
            }
            let n = agree(api, &buf, &lines, "live recording");
            assert!(n > 300, "{api}: only {n} fields compared");

            // The workload (record_live.c) as the decoder sees it.
            let recs: Vec<&Record> = d.records.iter().map(|r| &r.record).collect();
            let devices: Vec<_> = recs
                .iter()
                .filter_map(|r| match r {
                    Record::Device(d) => Some(d),
                    _ => None,
                })
                .collect();
            assert_eq!(devices.len(), 1, "{api}");
            let dev = devices[0];
            assert_eq!(
                (
                    dev.multiprocessors,
                    dev.compute_capability_major,
                    dev.compute_capability_minor,
                    dev.threads_per_warp
                ),
                (132, 9, 0, 32),
                "{api}: an H200"
            );
            assert!(dev.uuid_key().is_some(), "{api}");
            assert!(names.iter().any(|n| n == "NVIDIA H200"), "{api}: {names:?}");
            let kernels: Vec<_> = recs
                .iter()
                .filter_map(|r| match r {
                    Record::Kernel(k) => Some((k.kind, k.grid, k.block, k.is_device_launched)),
                    _ => None,
                })
                .collect();
            let launched = (api != ApiVersion::Cupti12_8).then_some(false);
            let k = ActivityKind::CONCURRENT_KERNEL;
            assert_eq!(
                kernels,
                [
                    (k, [264, 1, 1], [128, 1, 1], launched),
                    (k, [33, 1, 1], [256, 1, 1], launched)
                ],
                "{api}"
            );
            let copies: Vec<_> = recs
                .iter()
                .filter_map(|r| match r {
                    Record::Memcpy(m) => Some((m.copy_kind, m.bytes, m.is_device_launched)),
                    _ => None,
                })
                .collect();
            assert_eq!(
                copies,
                [
                    (1, 1 << 20, launched),
                    (2, 65_536, launched),
                    (8, 4096, launched)
                ],
                "{api}: HTOD, DTOH, DTOD"
            );
            let sets: Vec<_> = recs
                .iter()
                .filter_map(|r| match r {
                    Record::Memset(m) => Some((m.value, m.bytes, m.is_device_launched)),
                    _ => None,
                })
                .collect();
            assert_eq!(sets, [(171, 12_289, launched)], "{api}");
            let memory: Vec<_> = recs
                .iter()
                .filter_map(|r| match r {
                    Record::Memory(m) => Some((m.operation.raw(), m.bytes, m.is_async)),
                    _ => None,
                })
                .collect();
            assert_eq!(
                memory,
                [
                    (1, 4 << 20, 0),
                    (1, 3 << 20, 1),
                    (2, 3 << 20, 1),
                    (2, 4 << 20, 0)
                ],
                "{api}: cuMemAlloc, cuMemAllocAsync, cuMemFreeAsync, cuMemFree"
            );
            assert!(
                recs.iter()
                    .any(|r| matches!(r, Record::ExternalCorrelation(e)
                    if e.external_kind == 3 && e.external_id == 4242)),
                "{api}: the pushed CUSTOM0 id"
            );
            let graphs = recs
                .iter()
                .filter(|r| matches!(r, Record::GraphTrace(_)))
                .count();
            assert_eq!(graphs, 1, "{api}");
            assert_eq!(
                d.skipped.get("jit"),
                Some(&1),
                "{api}: the PTX module's JIT"
            );
            // And metered: the device from its DEVICE record, both kernels on it.
            let mut m = meter();
            let opts = CuptiOptions {
                api,
                ..CuptiOptions::default()
            };
            let s = ok(meter_buffer(&mut m, "live.bin", &buf, &opts));
            assert_eq!(s.device_keys.len(), 1, "{api}");
            let r = finish(m);
            let key = &s.device_keys[0];
            assert_eq!(r.device_total(key, MeterKind::KernelLaunches), 2, "{api}");
            assert_eq!(r.device(key).and_then(|d| d.sm_count), Some(132), "{api}");
            eprintln!(
                "{api}: {} live records, {n} fields agree with libcupti's walk",
                d.records.len()
            );
        }
    }
}

// ------------------------------------------------------------------------------------------

mod metering {
    use super::*;

    const UUID: [u8; 16] = [
        0x74, 0xe1, 0x28, 0xb2, 0x90, 0xb6, 0xb4, 0x09, 0x07, 0xc8, 0x33, 0xbe, 0xe5, 0xff, 0x6f,
        0x88,
    ];
    const KEY: &str = "GPU-74e128b2-90b6-b409-07c8-33bee5ff6f88";

    fn device(b: &mut Buf, sms: u32, name_ptr: u64) {
        b.rec(
            ActivityKind::DEVICE,
            &[
                ("id", 0),
                ("numMultiprocessors", sms.into()),
                ("computeCapabilityMajor", 9),
                ("computeCapabilityMinor", 0),
                ("numThreadsPerWarp", 32),
                ("maxWarpsPerMultiprocessor", 64),
                ("maxBlocksPerMultiprocessor", 32),
                ("maxSharedMemoryPerMultiprocessor", 233_472),
                ("maxRegistersPerMultiprocessor", 65_536),
                ("uuid", i128::from_le_bytes(UUID)),
                ("name", name_ptr.into()),
            ],
        );
    }

    /// The acceptance case: a raw buffer holding a DEVICE record and kernels meters `sm_ns`
    /// with that device's SM count, and a lost-timestamp kernel is loss.
    #[test]
    fn device_record_sm_count_and_zero_timestamp_loss() {
        for api in ApiVersion::ALL {
            let mut b = Buf::new(api);
            device(&mut b, 132, 0xdead_0000);
            b.kernel(T0, T0 + 1_000, 264, 1); // holds all 132 SMs: 132_000 SM·ns
            b.kernel(T0 + 2_000, T0 + 2_500, 10, 2); // 10 SMs × 500 ns
            b.kernel(0, T0 + 3_000, 10, 3); // start lost
            b.kernel(T0 + 4_000, 0, 10, 4); // end lost
            let mut names = StringTable::new();
            names.insert(0xdead_0000, "NVIDIA H100 80GB HBM3");
            let opts = CuptiOptions {
                api,
                strings: Some(&names),
                on_device: None,
            };
            let mut m = meter();
            let s = ok(meter_buffer(&mut m, "buf.bin", &b.bytes, &opts));
            assert_eq!(s.device_keys, [KEY]);
            assert_eq!((s.records, s.format.as_str()), (4, "cupti"));
            let r = finish(m);
            assert_eq!(
                r.device_total(KEY, MeterKind::SmNs),
                132_000 + 5_000,
                "{api}"
            );
            assert_eq!(r.device_total(KEY, MeterKind::KernelLaunches), 2);
            assert_eq!(r.device_total(KEY, MeterKind::KernelNs), 1_500);
            assert_eq!(r.lost(KEY, "zero_timestamp"), 2);
            let dev = r.device(KEY).unwrap_or_else(|| panic!("no device"));
            assert_eq!(dev.sm_count, Some(132));
            assert_eq!(dev.name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
            assert_eq!(dev.compute_capability.as_deref(), Some("9.0"));
            assert!(dev.not_meterable.is_empty());
            assert_eq!(r.sources[0].format, "cupti");
        }
    }

    #[test]
    fn without_a_device_record_sm_ns_is_not_meterable_unless_a_hook_says() {
        let mut b = Buf::new(ApiVersion::Cupti12_8);
        b.kernel(T0, T0 + 1_000, 264, 1);
        let mut m = meter();
        let s = ok(meter_buffer(
            &mut m,
            "k.bin",
            &b.bytes,
            &CuptiOptions::default(),
        ));
        let k0 = format!("{}#0", &s.sha256[..16]);
        assert_eq!(s.device_keys, std::slice::from_ref(&k0));
        let r = finish(m);
        let dev = r.device(&k0).unwrap_or_else(|| panic!("no device"));
        // sm_ns and, building on it, warp_ns: both listed, as the warning says.
        let nm: Vec<MeterKind> = dev.not_meterable.iter().map(|n| n.meter).collect();
        assert_eq!(nm, [MeterKind::SmNs, MeterKind::WarpNs]);
        assert_eq!(r.device_total(&k0, MeterKind::SmNs), 0);

        // A catalog-like hook supplies the SM count before the records are pushed.
        let hook = |m: &mut Meter, slot: DeviceSlot| {
            let key = m.device(slot).map(|d| d.key.clone()).unwrap_or_default();
            let mut over = gpumeter_core::DeviceInfo::bare("", 0);
            over.sm_count = Some(100);
            m.override_device(&key, &over);
        };
        let mut m = meter();
        let opts = CuptiOptions {
            on_device: Some(&hook),
            ..CuptiOptions::default()
        };
        ok(meter_buffer(&mut m, "k.bin", &b.bytes, &opts));
        let r = finish(m);
        assert_eq!(r.device_total(&k0, MeterKind::SmNs), 100_000);
    }

    #[test]
    fn process_and_external_id_joins() {
        for api in ApiVersion::ALL {
            let mut b = Buf::new(api);
            // The kernels come first; their API records later in the buffer.
            b.kernel(T0, T0 + 100, 1, 100);
            b.kernel(T0 + 200, T0 + 300, 1, 101);
            b.kernel(T0 + 400, T0 + 500, 1, 102);
            b.kernel(T0 + 600, T0 + 700, 1, 0);
            let api_rec = |b: &mut Buf, kind, corr: u32, pid: u32| {
                b.rec(
                    kind,
                    &[("correlationId", corr.into()), ("processId", pid.into())],
                );
            };
            api_rec(&mut b, ActivityKind::RUNTIME, 100, 4242);
            api_rec(&mut b, ActivityKind::DRIVER, 101, 4243);
            api_rec(&mut b, ActivityKind::INTERNAL_LAUNCH_API, 102, 4244);
            let ext = |b: &mut Buf, kind: u32, id: u64, corr: u32| {
                b.rec(
                    ActivityKind::EXTERNAL_CORRELATION,
                    &[
                        ("externalKind", kind.into()),
                        ("externalId", id.into()),
                        ("correlationId", corr.into()),
                    ],
                );
            };
            ext(&mut b, 4, 7002, 100); // CUSTOM1
            ext(&mut b, 3, 1001, 100); // CUSTOM0 wins
            ext(&mut b, 2, 55, 101); // OPENACC: not an attribution id
            let mut m = meter();
            let mut map = TenantMap::default();
            map.external.insert(1001, tn("alice"));
            map.external.insert(55, tn("nobody"));
            map.pid.insert(4242, tn("carol"));
            map.pid.insert(4243, tn("dave"));
            m.set_tenant_map(map);
            let s = ok(meter_buffer(
                &mut m,
                "j.bin",
                &b.bytes,
                &CuptiOptions {
                    api,
                    ..CuptiOptions::default()
                },
            ));
            assert_eq!((s.process_ids_joined, s.external_ids_joined), (3, 1));
            let r = finish(m);
            let by_tenant: BTreeMap<&str, u128> = r
                .totals
                .iter()
                .filter(|t| t.meter == MeterKind::KernelNs)
                .map(|t| (t.tenant.as_str(), t.quantity.0))
                .collect();
            let want: BTreeMap<&str, u128> = [("alice", 100), ("dave", 100), ("unattributed", 200)]
                .into_iter()
                .collect();
            assert_eq!(by_tenant, want, "{api}");
        }
    }

    #[test]
    fn copies_memsets_graphs_and_skipped_kinds() {
        for api in ApiVersion::ALL {
            let mut b = Buf::new(api);
            let copy = |b: &mut Buf, kind: u8, bytes: u64, t: u64| {
                b.rec(
                    ActivityKind::MEMCPY,
                    &[
                        ("copyKind", kind.into()),
                        ("bytes", bytes.into()),
                        ("start", t.into()),
                        ("end", (t + 10).into()),
                    ],
                );
            };
            copy(&mut b, 1, 1000, T0);
            copy(&mut b, 2, 2000, T0 + 20);
            copy(&mut b, 8, 3000, T0 + 40);
            copy(&mut b, 10, 4000, T0 + 60);
            copy(&mut b, 9, 5000, T0 + 80); // HTOH: other
            copy(&mut b, 6, 6000, T0 + 100); // ATOD: other
            b.rec(
                ActivityKind::MEMCPY2,
                &[
                    ("copyKind", 10),
                    ("bytes", 7000),
                    ("start", (T0 + 120).into()),
                    ("end", (T0 + 130).into()),
                    ("deviceId", 1),
                    ("srcDeviceId", 1),
                    ("dstDeviceId", 0),
                ],
            );
            b.rec(
                ActivityKind::MEMSET,
                &[
                    ("bytes", 8000),
                    ("start", (T0 + 140).into()),
                    ("end", (T0 + 150).into()),
                ],
            );
            b.rec(
                ActivityKind::GRAPH_TRACE,
                &[("start", (T0 + 200).into()), ("end", (T0 + 300).into())],
            );
            b.rec(ActivityKind::OVERHEAD, &[("start", T0.into())]);
            b.rec(ActivityKind::MARKER, &[]);
            b.rec(ActivityKind::MEMORY2, &[("bytes", 1 << 20)]);
            b.rec(ActivityKind::INSTRUCTION_EXECUTION, &[]);
            b.rec(ActivityKind::CONTEXT, &[("contextId", 1)]);
            let mut m = meter();
            let s = ok(meter_buffer(
                &mut m,
                "c.bin",
                &b.bytes,
                &CuptiOptions {
                    api,
                    ..CuptiOptions::default()
                },
            ));
            // Skipped: OVERHEAD, MARKER, and the MEMORY2 record of operation 0 (neither
            // allocation nor release); INSTRUCTION_EXECUTION is consumed by the join.
            assert_eq!((s.records, s.skipped), (9, 3), "{api}");
            let label = s.sha256[..16].to_string();
            let (k0, k1) = (format!("{label}#0"), format!("{label}#1"));
            assert_eq!(s.device_keys, [k0.clone(), k1.clone()]);
            let r = finish(m);
            let k0 = k0.as_str();
            assert_eq!(r.device_total(k0, MeterKind::MemcpyHtodBytes), 1000);
            assert_eq!(r.device_total(k0, MeterKind::MemcpyDtohBytes), 2000);
            assert_eq!(r.device_total(k0, MeterKind::MemcpyDtodBytes), 3000);
            assert_eq!(r.device_total(k0, MeterKind::MemcpyPeerBytes), 4000);
            assert_eq!(r.device_total(k0, MeterKind::MemcpyOtherBytes), 11_000);
            assert_eq!(r.device_total(k0, MeterKind::MemsetBytes), 8000);
            // The peer copy is billed on the device of its record.
            assert_eq!(r.device_total(&k1, MeterKind::MemcpyPeerBytes), 7000);
            // 6 copies + memset of 10 ns, graph 100 ns, on device 0.
            assert_eq!(r.device_total(k0, MeterKind::GpuBusyNs), 70 + 100);
            for cat in ["overhead", "marker", "memory2_other_operation"] {
                assert_eq!(r.records.skipped.get(cat), Some(&1), "{cat}");
            }
        }
    }

    #[test]
    fn a_record_with_a_negative_grid_is_lost_and_the_rest_metered() {
        let api = ApiVersion::Cupti12_8;
        let mut b = Buf::new(api);
        b.kernel(T0, T0 + 100, 1, 1);
        let at = b.kernel(T0, T0 + 100, -3, 2);
        let mut m = meter();
        let s = ok(meter_buffer(
            &mut m,
            "neg.bin",
            &b.bytes,
            &CuptiOptions::default(),
        ));
        assert_eq!(s.records, 2);
        let key = format!("{}#0", &s.sha256[..16]);
        let r = finish(m);
        assert_eq!(r.device_total(&key, MeterKind::KernelLaunches), 1);
        assert_eq!(r.lost(&key, "invalid_field"), 1);
        let w = r
            .warnings
            .iter()
            .find(|w| w.contains("invalid_field"))
            .map(|w| w.to_string())
            .unwrap_or_default();
        assert!(
            w.contains("neg.bin")
                && w.contains(&format!("record at byte {at}"))
                && w.contains("`gridX` = -3"),
            "{w}"
        );
    }

    #[test]
    fn errors_leave_the_meter_untouched() {
        let api = ApiVersion::Cupti12_8;
        let mut b = Buf::new(api);
        b.kernel(T0, T0 + 100, 1, 1);
        b.kernel(T0, T0 + 100, 2, 2);
        let mut m = meter();
        let cut = &b.bytes[..b.bytes.len() - 8];
        let e = meter_buffer(&mut m, "cut.bin", cut, &CuptiOptions::default());
        let msg = match e {
            Err(e) => e.to_string(),
            Ok(_) => panic!("metered a truncated buffer"),
        };
        assert!(
            msg.starts_with("cut.bin: truncated record at byte 208"),
            "{msg}"
        );
        let r = finish(m);
        assert!(r.sources.is_empty() && r.devices.is_empty() && r.totals.is_empty());
    }

    #[test]
    fn the_same_source_twice_is_metered_once() {
        let mut b = Buf::new(ApiVersion::Cupti12_8);
        b.kernel(T0, T0 + 100, 1, 1);
        let mut m = meter();
        let first = ok(meter_buffer(
            &mut m,
            "a.bin",
            &b.bytes,
            &CuptiOptions::default(),
        ));
        let again = ok(meter_buffer(
            &mut m,
            "b.bin",
            &b.bytes,
            &CuptiOptions::default(),
        ));
        assert!(!first.duplicate_source && again.duplicate_source);
        assert_eq!(first.sha256, again.sha256);
        let r = finish(m);
        let key = format!("{}#0", &first.sha256[..16]);
        assert_eq!(r.device_total(&key, MeterKind::KernelNs), 100);
        assert_eq!(r.sources.len(), 1);
    }
}

// ------------------------------------------------------------------------------------------

mod gmr_format {
    use super::*;
    use proptest::prelude::*;

    pub(super) fn header(api: u32) -> GmrHeader {
        GmrHeader {
            cupti_api_version: api,
            host: "node-7".into(),
            clock: gpumeter_cupti::gmr::ClockPair {
                cupti_timestamp_ns: T0,
                unix_time_ns: T0 + 17,
            },
            process_id: 4242,
            devices: vec![GmrDevice {
                id: 0,
                name: Some("NVIDIA H100 80GB HBM3".into()),
                uuid: Some("GPU-74e128b2-90b6-b409-07c8-33bee5ff6f88".into()),
                sm_count: Some(132),
                compute_capability: Some("9.0".into()),
            }],
            producer: gpumeter_cupti::gmr::Producer {
                name: "test".into(),
                version: "0".into(),
            },
            instrumented: false,
        }
    }

    pub(super) fn write(h: &GmrHeader, frames: &[Frame], finish: bool) -> (Vec<u8>, Vec<usize>) {
        let mut offsets = Vec::new();
        let mut w = ok(GmrWriter::new(Vec::new(), h));
        let mut len = GMR_PREAMBLE_LEN + 16 + ok(serde_json::to_vec(h)).len();
        for f in frames {
            offsets.push(len);
            ok(w.write_frame(f));
            len += 16 + payload_len(f);
        }
        if finish {
            (ok(w.finish()), offsets)
        } else {
            // Unfinished: take the bytes as they are (no end frame).
            let bytes = ok(w.finish());
            let end = bytes.len() - 16;
            (bytes[..end].to_vec(), offsets)
        }
    }

    /// A frame of type `kind` around `payload` (type, length, payload, CRC-32 of the three),
    /// as written, whatever the payload holds.
    pub(super) fn raw_frame(kind: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&kind.to_le_bytes());
        f.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        f.extend_from_slice(payload);
        let mut crc = crc32fast::Hasher::new();
        crc.update(&f);
        f.extend_from_slice(&crc.finalize().to_le_bytes());
        f
    }

    fn payload_len(f: &Frame) -> usize {
        match f {
            Frame::ActivityBuffer(b) => b.len(),
            Frame::StringTable(t) => t.entries.values().map(|s| 12 + s.len()).sum(),
            Frame::Dropped(_) | Frame::Energy(_) => 24,
            Frame::Attribution(a) => 28 + a.label.len(),
            Frame::Instructions(c) => {
                16 + c.functions.iter().map(|f| 12 + f.name.len()).sum::<usize>()
            }
            Frame::PmSamples(s) => 8 + 56 * s.samples.len(),
            Frame::OpCounts(c) => {
                16 + c
                    .kernels
                    .iter()
                    .map(|k| {
                        8 + k
                            .counters
                            .iter()
                            .map(|v| 12 + v.metric.len())
                            .sum::<usize>()
                    })
                    .sum::<usize>()
            }
            _ => panic!(),
        }
    }

    fn frame_strategy() -> impl Strategy<Value = Frame> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..300).prop_map(Frame::ActivityBuffer),
            proptest::collection::btree_map(any::<u64>(), ".{0,20}", 0..5)
                .prop_map(|entries| Frame::StringTable(StringTable { entries })),
            (
                any::<Option<u32>>(),
                any::<u32>(),
                any::<u32>(),
                any::<u64>()
            )
                .prop_map(|(d, c, s, n)| Frame::Dropped(DroppedRecords {
                    device_id: d.filter(|&d| d != u32::MAX),
                    context_id: c,
                    stream_id: s,
                    count: n,
                })),
            (1u32..6, any::<u32>(), any::<u64>(), any::<u64>(), ".{0,12}").prop_map(
                |(k, p, e, t, l)| Frame::Attribution(AttributionEvent {
                    kind: match k {
                        1 => AttributionKind::ExternalPush,
                        2 => AttributionKind::ExternalPop,
                        3 => AttributionKind::TenantHint,
                        o => AttributionKind::Other(o),
                    },
                    process_id: p,
                    external_id: e,
                    timestamp_ns: t,
                    label: l,
                })
            ),
            (any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(d, t, e)| Frame::Energy(
                EnergySample {
                    device_id: d,
                    timestamp_ns: t,
                    energy_mj: e,
                }
            )),
            (
                any::<(u32, u32, u32)>(),
                proptest::collection::vec((".{0,16}", any::<u64>()), 0..4)
            )
                .prop_map(|((c, d, x), fs)| Frame::Instructions(InstructionCounts {
                    correlation_id: c,
                    device_id: d,
                    context_id: x,
                    functions: fs
                        .into_iter()
                        .map(|(name, warp_instructions)| FunctionInstructions {
                            name,
                            warp_instructions,
                        })
                        .collect(),
                })),
            (
                any::<u32>(),
                proptest::collection::vec(pm_sample_strategy(), 0..4)
            )
                .prop_map(|(device_id, samples)| Frame::PmSamples(PmSamples {
                    device_id,
                    samples
                })),
            (
                any::<(u32, u32, u32)>(),
                proptest::collection::btree_map(
                    1u32..,
                    proptest::collection::btree_map("[a-z_.]{1,16}", any::<u64>(), 0..4),
                    0..4
                )
            )
                .prop_map(|((device_id, context_id, passes), kernels)| {
                    Frame::OpCounts(gpumeter_cupti::gmr::OpCounters {
                        device_id,
                        context_id,
                        passes,
                        kernels: kernels
                            .into_iter()
                            .map(|(correlation_id, counters)| {
                                gpumeter_cupti::gmr::KernelOpCounters {
                                    correlation_id,
                                    counters: counters
                                        .into_iter()
                                        .map(|(metric, value)| {
                                            gpumeter_cupti::gmr::OpCounterValue { metric, value }
                                        })
                                        .collect(),
                                }
                            })
                            .collect(),
                    })
                }),
        ]
    }

    fn pm_sample_strategy() -> impl Strategy<Value = PmSample> {
        (
            any::<(u64, u64, bool)>(),
            any::<(Option<u64>, Option<u64>, Option<u64>, Option<u64>)>(),
        )
            .prop_map(|((start_ns, end_ns, overflow), (a, e, r, w))| PmSample {
                start_ns,
                end_ns,
                sm_active_cycles: a,
                sm_elapsed_cycles: e,
                dram_read_bytes: r,
                dram_write_bytes: w,
                overflow,
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Random frames written and read back are equal, in order, at their offsets.
        #[test]
        fn round_trip(frames in proptest::collection::vec(frame_strategy(), 0..12),
                      api in any::<u32>(), host in ".{0,16}") {
            let mut h = header(api);
            h.host = host;
            let (bytes, offsets) = write(&h, &frames, true);
            let file = ok(read_gmr(&bytes));
            prop_assert_eq!(&file.header, &h);
            prop_assert!(file.finished && file.torn.is_none());
            prop_assert_eq!(file.unknown_frames, 0);
            let got: Vec<Frame> = file.frames.iter().map(|f| f.frame.clone()).collect();
            prop_assert_eq!(got, frames);
            let got_offsets: Vec<usize> = file.frames.iter().map(|f| f.offset as usize).collect();
            prop_assert_eq!(got_offsets, offsets);
        }

        /// The reader never panics, on any bytes after a valid preamble or on a damaged file.
        #[test]
        fn reader_never_panics(tail in proptest::collection::vec(any::<u8>(), 0..400),
                               flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4)) {
            let (mut bytes, _) = write(&header(26), &[Frame::ActivityBuffer(vec![1; 40])], true);
            let _ = read_gmr(&bytes);
            let len = bytes.len();
            for (at, x) in flips {
                bytes[at % len] ^= x;
            }
            bytes.extend_from_slice(&tail);
            let _ = read_gmr(&bytes);
            let _ = meter_gmr(&mut meter(), "x.gmr", &bytes, &CuptiOptions::default());
        }
    }

    fn sample_frames() -> Vec<Frame> {
        let mut t = StringTable::new();
        t.insert(0x1000, "k");
        vec![
            Frame::StringTable(t),
            Frame::ActivityBuffer(vec![0; 16]),
            Frame::Dropped(DroppedRecords {
                device_id: Some(0),
                context_id: 1,
                stream_id: 2,
                count: 3,
            }),
            Frame::Energy(EnergySample {
                device_id: 0,
                timestamp_ns: T0,
                energy_mj: 5,
            }),
            Frame::Instructions(instruction_counts()),
            Frame::PmSamples(pm_samples()),
        ]
    }

    fn instruction_counts() -> InstructionCounts {
        InstructionCounts {
            correlation_id: 77,
            device_id: 1,
            context_id: 3,
            functions: vec![
                FunctionInstructions {
                    name: "_Z6vecAddPKfS0_Pfi".into(),
                    warp_instructions: 4_000_000_000_123,
                },
                FunctionInstructions {
                    name: "k\u{e9}".into(),
                    warp_instructions: 0,
                },
            ],
        }
    }

    /// Instruction-count frames (type 8): the documented layout byte for byte, the header
    /// flag, and payloads that are cut short, overlong or not UTF-8 are typed errors.
    #[test]
    fn instruction_counts_frame_layout_and_bad_payloads() {
        let c = instruction_counts();
        assert_eq!(c.total(), 4_000_000_000_123);
        let mut h = header(26);
        let plain = ok(serde_json::to_string(&h));
        assert!(!plain.contains("instrumented"), "{plain}");
        h.instrumented = true;
        let (bytes, offsets) = write(&h, &[Frame::Instructions(c.clone())], true);
        let file = ok(read_gmr(&bytes));
        assert!(file.header.instrumented);
        assert_eq!(file.frames[0].frame, Frame::Instructions(c.clone()));
        let at = offsets[0];
        let mut payload = Vec::new();
        for v in [77u32, 1, 3, 2] {
            payload.extend_from_slice(&v.to_le_bytes());
        }
        payload.extend_from_slice(&4_000_000_000_123u64.to_le_bytes());
        payload.extend_from_slice(&18u32.to_le_bytes());
        payload.extend_from_slice(b"_Z6vecAddPKfS0_Pfi");
        payload.extend_from_slice(&0u64.to_le_bytes());
        payload.extend_from_slice(&3u32.to_le_bytes());
        payload.extend_from_slice("k\u{e9}".as_bytes());
        assert_eq!(&bytes[at..at + 4], &8u32.to_le_bytes());
        assert_eq!(
            &bytes[at + 4..at + 12],
            &(payload.len() as u64).to_le_bytes()
        );
        assert_eq!(&bytes[at + 12..at + 12 + payload.len()], &payload[..]);

        // Hand-made frames with a right checksum and a bad payload.
        let frame = |p: &[u8]| raw_frame(8, p);
        let (head, _) = write(&header(26), &[], false);
        let with = |p: &[u8]| {
            let mut b = head.clone();
            b.extend_from_slice(&frame(p));
            read_gmr(&b)
        };
        // Trailing bytes after the functions are ignored (forward compatibility).
        let mut longer = payload.clone();
        longer.extend_from_slice(&[9, 9, 9]);
        match with(&longer) {
            Ok(f) => assert_eq!(f.frames[0].frame, Frame::Instructions(c.clone())),
            Err(e) => panic!("{e}"),
        }
        // Too short for the fixed part; a count larger than the entries; a name past the end;
        // a name that is not UTF-8.
        let mut huge_count = payload.clone();
        huge_count[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        let mut long_name = payload.clone();
        long_name[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
        let mut not_utf8 = payload.clone();
        let last = not_utf8.len() - 1;
        not_utf8[last] = 0xff;
        for (what, bad) in [
            ("short", &payload[..15]),
            ("count", &huge_count[..]),
            ("name length", &long_name[..]),
            ("utf-8", &not_utf8[..]),
            ("cut", &payload[..payload.len() - 1]),
        ] {
            // Its checksum is right, so its producer wrote it so: the frame is lost as
            // malformed, saying why, and the file is read on.
            match with(bad) {
                Ok(f)
                    if f.frames.is_empty()
                        && f.damaged.len() == 1
                        && f.damaged[0].damage == Damage::Malformed
                        && f.damaged[0].frame_type == Some(8)
                        && !f.damaged[0].detail.is_empty() => {}
                other => panic!("{what}: {other:?}"),
            }
        }
    }

    fn pm_samples() -> PmSamples {
        PmSamples {
            device_id: 1,
            samples: vec![
                PmSample {
                    start_ns: T0,
                    end_ns: T0 + 100_000,
                    sm_active_cycles: Some(13_200_000),
                    sm_elapsed_cycles: Some(198_000),
                    dram_read_bytes: Some(4_000_000_000_001),
                    dram_write_bytes: Some(0),
                    overflow: false,
                },
                PmSample {
                    start_ns: T0 + 100_000,
                    end_ns: T0 + 200_000,
                    sm_active_cycles: None,
                    sm_elapsed_cycles: Some(7),
                    dram_read_bytes: None,
                    dram_write_bytes: Some(u64::MAX),
                    overflow: true,
                },
            ],
        }
    }

    /// PM-sample frames (type 9): the documented layout byte for byte (flags say which
    /// counters are there, absent ones are written 0), and payloads that are cut short,
    /// longer than their count, or carry unknown flag bits are malformed, naming the frame.
    #[test]
    fn pm_samples_frame_layout_and_bad_payloads() {
        let s = pm_samples();
        let (bytes, offsets) = write(&header(26), &[Frame::PmSamples(s.clone())], true);
        let file = ok(read_gmr(&bytes));
        assert_eq!(file.frames[0].frame, Frame::PmSamples(s.clone()));
        assert_eq!(file.unknown_frames, 0);
        let at = offsets[0];
        let mut payload = Vec::new();
        payload.extend_from_slice(&1u32.to_le_bytes());
        payload.extend_from_slice(&2u32.to_le_bytes());
        // Sample 0: all four counters (bits 1-4), no overflow.
        payload.extend_from_slice(&0b11110u32.to_le_bytes());
        payload.extend_from_slice(&0u32.to_le_bytes());
        for v in [T0, T0 + 100_000, 13_200_000, 198_000, 4_000_000_000_001, 0] {
            payload.extend_from_slice(&v.to_le_bytes());
        }
        // Sample 1: overflow (bit 0), elapsed (bit 2), write (bit 4); absent ones are 0.
        payload.extend_from_slice(&0b10101u32.to_le_bytes());
        payload.extend_from_slice(&0u32.to_le_bytes());
        for v in [T0 + 100_000, T0 + 200_000, 0, 7, 0, u64::MAX] {
            payload.extend_from_slice(&v.to_le_bytes());
        }
        assert_eq!(payload.len(), 8 + 2 * 56);
        assert_eq!(&bytes[at..at + 4], &9u32.to_le_bytes());
        assert_eq!(
            &bytes[at + 4..at + 12],
            &(payload.len() as u64).to_le_bytes()
        );
        assert_eq!(&bytes[at + 12..at + 12 + payload.len()], &payload[..]);
        // An empty batch round-trips too.
        let empty = PmSamples {
            device_id: 3,
            samples: Vec::new(),
        };
        let (bytes, _) = write(&header(26), &[Frame::PmSamples(empty.clone())], true);
        assert_eq!(
            ok(read_gmr(&bytes)).frames[0].frame,
            Frame::PmSamples(empty)
        );

        let frame = |p: &[u8]| raw_frame(9, p);
        let (head, _) = write(&header(26), &[], false);
        let with = |p: &[u8]| {
            let mut b = head.clone();
            b.extend_from_slice(&frame(p));
            // A good frame after it: reading goes on past the malformed one.
            let mut w = ok(GmrWriter::new(Vec::new(), &header(26)));
            ok(w.write_pm_samples(&pm_samples()));
            let good = ok(w.finish());
            let (h, _) = write(&header(26), &[], false);
            b.extend_from_slice(&good[h.len()..]);
            read_gmr(&b)
        };
        let mut longer = payload.clone();
        longer.extend_from_slice(&[0; 56]);
        let mut fewer = payload.clone();
        fewer[4..8].copy_from_slice(&1u32.to_le_bytes());
        let mut huge_count = payload.clone();
        huge_count[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        let mut bad_flag = payload.clone();
        bad_flag[8 + 56..8 + 56 + 4].copy_from_slice(&(0b10101u32 | 1 << 5).to_le_bytes());
        let mut high_flag = payload.clone();
        high_flag[8..12].copy_from_slice(&(1u32 << 31).to_le_bytes());
        // Sample 1's reserved field, and its sm_active_cycles with its flag (bit 1) clear.
        let mut reserved = payload.clone();
        reserved[8 + 56 + 4..8 + 56 + 8].copy_from_slice(&2u32.to_le_bytes());
        let mut stray = payload.clone();
        stray[8 + 56 + 24..8 + 56 + 32].copy_from_slice(&5u64.to_le_bytes());
        for (what, bad, needle) in [
            ("short", &payload[..7], "too short"),
            ("cut", &payload[..payload.len() - 1], "does not hold"),
            ("longer than its count", &longer[..], "does not hold"),
            ("count below the samples", &fewer[..], "does not hold"),
            ("huge count", &huge_count[..], "does not hold"),
            (
                "unknown flag bit 5",
                &bad_flag[..],
                "PM sample #1 of 2 (numbered from #0, at payload byte 64) has unknown flag bits 0x20",
            ),
            (
                "unknown flag bit 31",
                &high_flag[..],
                "PM sample #0 of 2 (numbered from #0, at payload byte 8) has unknown flag bits 0x80000000",
            ),
            (
                "nonzero reserved field",
                &reserved[..],
                "PM sample #1 of 2 (numbered from #0, at payload byte 64) has a nonzero reserved field 0x2",
            ),
            (
                "a counter with its flag clear",
                &stray[..],
                "PM sample #1 of 2 (numbered from #0, at payload byte 64) has sm_active_cycles 5 with its presence flag 0x2 clear",
            ),
        ] {
            match with(bad) {
                Ok(f)
                    if f.frames
                        == [LocatedFrame {
                            offset: f.frames[0].offset,
                            index: 2,
                            frame: Frame::PmSamples(pm_samples()),
                        }]
                        && f.damaged.len() == 1
                        && f.damaged[0].damage == Damage::Malformed
                        && f.damaged[0].frame_type == Some(9)
                        && f.damaged[0].holds_no_records()
                        && f.damaged[0].detail.contains(needle) =>
                {
                    let shown = f.damaged[0].to_string();
                    assert!(
                        shown.contains("frame #1") && shown.contains("(type 9)"),
                        "{shown}"
                    );
                }
                other => panic!("{what}: {other:?}"),
            }
        }
    }

    /// A file cut at every byte of its last frame keeps the frames before it and reports the
    /// tear; cut exactly before it, it is merely unfinished.
    #[test]
    fn torn_last_frame_keeps_earlier_frames() {
        let frames = sample_frames();
        let (bytes, offsets) = write(&header(26), &frames, false);
        let last = offsets[offsets.len() - 1];
        for cut in last..bytes.len() {
            let file = ok(read_gmr(&bytes[..cut]));
            let got: Vec<Frame> = file.frames.iter().map(|f| f.frame.clone()).collect();
            assert_eq!(got, frames[..frames.len() - 1], "cut at {cut}");
            assert!(!file.finished);
            if cut == last {
                assert_eq!(file.torn, None);
            } else {
                let t = file.torn.unwrap_or_else(|| panic!("cut at {cut}: no tear"));
                assert_eq!(
                    (t.offset, t.bytes, t.reason),
                    (last as u64, (cut - last) as u64, TornReason::ShortRead)
                );
            }
        }
        // The complete file reads whole, without a tear.
        let file = ok(read_gmr(&bytes));
        assert_eq!(file.frames.len(), frames.len());
        assert_eq!(file.torn, None);
        // A complete last frame whose checksum is wrong is torn too.
        let mut bad = bytes.clone();
        let n = bad.len();
        bad[n - 1] ^= 0xff;
        let file = ok(read_gmr(&bad));
        assert_eq!(file.frames.len(), frames.len() - 1);
        assert_eq!(
            file.torn.map(|t| (t.offset, t.reason)),
            Some((last as u64, TornReason::BadChecksum))
        );
    }

    #[test]
    fn corruption_in_the_middle_loses_the_frame_or_the_rest_never_silently() {
        let frames = sample_frames();
        let (bytes, offsets) = write(&header(26), &frames, true);
        // Flip a payload byte of the second frame (the activity buffer): that frame is
        // listed as damaged and the frames after it are read.
        let mut bad = bytes.clone();
        bad[offsets[1] + 12] ^= 1;
        let file = ok(read_gmr(&bad));
        assert_eq!(file.frames.len(), frames.len() - 1);
        assert!(file.finished && file.torn.is_none());
        assert_eq!(file.damaged.len(), 1);
        let d = &file.damaged[0];
        assert_eq!(
            (d.offset, d.index, d.frame_type, d.damage),
            (offsets[1] as u64, 2, Some(2), Damage::Corrupt)
        );
        // Corrupt the length field too: it cannot be trusted, so reading resumes at the next
        // frame whose checksum is right.
        let mut long = bad.clone();
        long[offsets[1] + 4] ^= 0x40;
        let file = ok(read_gmr(&long));
        assert_eq!(file.frames.len(), frames.len() - 1);
        assert!(file.finished);
        assert_eq!(file.damaged.len(), 1);
        assert_eq!(file.damaged[0].damage, Damage::Corrupt);
        // With nothing readable after it, the framing is lost: the rest of the file cannot be
        // read, and the damage says so.
        let mut lost = bad[..offsets[2]].to_vec();
        lost.extend_from_slice(&[0xab; 64]);
        let file = ok(read_gmr(&lost));
        assert_eq!(file.frames.len(), 1, "only the frame before survives");
        assert!(!file.finished);
        assert_eq!(file.damaged.len(), 1);
        assert_eq!(file.damaged[0].damage, Damage::FramingLost);
        assert_eq!(file.damaged[0].payload.len(), lost.len() - offsets[1] - 12);
        // The header's checksum.
        let mut bad = bytes.clone();
        bad[GMR_PREAMBLE_LEN + 12] ^= 1;
        assert!(matches!(read_gmr(&bad), Err(GmrError::BadHeader { .. })));
        // Magic and version.
        assert!(matches!(read_gmr(&bytes[..10]), Err(GmrError::NotGmr)));
        assert!(matches!(
            read_gmr(b"GPUMETER-GMX\0\r\n\x1a\x01\0\0\0"),
            Err(GmrError::NotGmr)
        ));
        let mut v2 = bytes.clone();
        v2[16] = 2;
        assert!(matches!(
            read_gmr(&v2),
            Err(GmrError::UnsupportedFormatVersion(2))
        ));
        // Data after the end frame.
        let mut after = bytes.clone();
        after.extend_from_slice(&bytes[offsets[1]..offsets[2]]);
        assert!(matches!(
            read_gmr(&after),
            Err(GmrError::CorruptFrame { .. })
        ));
    }

    /// Dropped-count deltas are summed per device without overflow.
    #[test]
    fn dropped_counts_saturate() {
        let mut b = Buf::new(ApiVersion::Cupti12_8);
        b.kernel(T0, T0 + 10, 1, 1);
        let d = |count| {
            Frame::Dropped(DroppedRecords {
                device_id: Some(0),
                context_id: 1,
                stream_id: 0,
                count,
            })
        };
        let frames = [Frame::ActivityBuffer(b.bytes), d(u64::MAX - 1), d(5), d(0)];
        let (bytes, _) = write(&header(26), &frames, true);
        let mut m = meter();
        let s = ok(meter_gmr(&mut m, "d.gmr", &bytes, &CuptiOptions::default()));
        assert_eq!(s.dropped, u64::MAX);
        let r = finish(m);
        assert_eq!(r.lost(&s.device_keys[0], "dropped"), u64::MAX);
    }

    /// A frame type from a newer producer, with a good checksum, is skipped and counted.
    #[test]
    fn unknown_frame_types_are_skipped() {
        let (bytes, offsets) = write(&header(26), &sample_frames(), true);
        let mut with = bytes[..offsets[1]].to_vec();
        let payload = b"future";
        let mut h = crc32fast::Hasher::new();
        h.update(&99u32.to_le_bytes());
        h.update(&(payload.len() as u64).to_le_bytes());
        h.update(payload);
        with.extend_from_slice(&99u32.to_le_bytes());
        with.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        with.extend_from_slice(payload);
        with.extend_from_slice(&h.finalize().to_le_bytes());
        with.extend_from_slice(&bytes[offsets[1]..]);
        let file = ok(read_gmr(&with));
        assert_eq!(
            (file.unknown_frames, file.frames.len()),
            (1, sample_frames().len())
        );
        assert!(file.finished);
    }

    /// A whole recording metered: header inventory and string tables name the device, API
    /// records and the header's pid attribute, dropped counts are loss, a torn tail is a
    /// warning and the frames before it count.
    #[test]
    fn meter_a_recording() {
        for api in ApiVersion::ALL {
            let mut b1 = Buf::new(api);
            b1.rec(
                ActivityKind::DEVICE,
                &[("id", 0), ("numMultiprocessors", 132), ("name", 0xd00)],
            );
            b1.rec(ActivityKind::CONTEXT, &[("contextId", 5), ("deviceId", 0)]);
            b1.kernel(T0, T0 + 1_000, 264, 100);
            b1.rec(
                ActivityKind::RUNTIME,
                &[("correlationId", 100), ("processId", 999)],
            );
            let mut b2 = Buf::new(api);
            b2.kernel(T0 + 2_000, T0 + 3_000, 66, 101);
            let mut names = StringTable::new();
            names.insert(0xd00, "NVIDIA H100 80GB HBM3 (from strings)");
            let frames = vec![
                Frame::StringTable(names),
                Frame::ActivityBuffer(b1.bytes.clone()),
                Frame::Dropped(DroppedRecords {
                    device_id: None,
                    context_id: 5,
                    stream_id: 0,
                    count: 7,
                }),
                Frame::Energy(EnergySample::default()),
                Frame::ActivityBuffer(b2.bytes.clone()),
            ];
            let (mut bytes, offsets) = write(&header(api.cupti_api_version()), &frames, true);
            // Tear the file inside its end frame.
            bytes.truncate(bytes.len() - 3);
            let mut m = meter();
            let mut map = TenantMap::default();
            map.pid.insert(999, tn("api-pid"));
            map.pid.insert(4242, tn("header-pid"));
            m.set_tenant_map(map);
            let s = ok(meter_gmr(
                &mut m,
                "run.gmr",
                &bytes,
                &CuptiOptions::default(),
            ));
            assert_eq!(s.device_keys, ["GPU-74e128b2-90b6-b409-07c8-33bee5ff6f88"]);
            assert_eq!(
                (s.records, s.dropped, s.buffers, s.energy_samples),
                (2, 7, 2, 1)
            );
            assert!(s.torn.is_some() && !s.finished);
            assert_eq!(s.format.as_str(), "gmr");
            let r = finish(m);
            let key = &s.device_keys[0];
            let dev = r.device(key).unwrap_or_else(|| panic!("no device"));
            assert_eq!(
                dev.name.as_deref(),
                Some("NVIDIA H100 80GB HBM3 (from strings)")
            );
            assert_eq!(dev.sm_count, Some(132));
            assert_eq!(dev.compute_capability.as_deref(), Some("9.0"));
            assert_eq!(r.lost(key, "dropped"), 7);
            let sm: BTreeMap<&str, u128> = r
                .totals
                .iter()
                .filter(|t| t.meter == MeterKind::SmNs)
                .map(|t| (t.tenant.as_str(), t.quantity.0))
                .collect();
            let want: BTreeMap<&str, u128> = [("api-pid", 132_000), ("header-pid", 66_000)]
                .into_iter()
                .collect();
            assert_eq!(sm, want, "{api}");
            assert_warns(&r, "torn last frame");
            assert_eq!(r.sources[0].format, "gmr");

            // A buffer whose checksum is right but that does not decode: the records before
            // the fault are metered, the rest is loss of unknown count, and a warning names its
            // frame and the fault.
            let mut broken = frames.clone();
            broken[4] = Frame::ActivityBuffer(b2.bytes[..100].to_vec());
            let (bytes, offsets2) = write(&header(api.cupti_api_version()), &broken, true);
            assert_eq!(offsets2[..4], offsets[..4]);
            let mut m = meter();
            ok(meter_gmr(
                &mut m,
                "bad.gmr",
                &bytes,
                &CuptiOptions::default(),
            ));
            let r = finish(m);
            assert_eq!(r.sources.len(), 1);
            assert!(
                r.loss
                    .iter()
                    .any(|l| l.reason == "corrupt_frame" && l.lower_bound),
                "{:?}",
                r.loss
            );
            assert_warns(
                &r,
                &format!(
                    "frame #5 at byte {}: the activity buffer stops decoding (truncated record at byte 0",
                    offsets2[4]
                ),
            );
        }
        // An unsupported producer version is refused.
        let (bytes, _) = write(&header(27), &[], true);
        assert!(matches!(
            meter_gmr(&mut meter(), "v27.gmr", &bytes, &CuptiOptions::default()),
            Err(CuptiSourceError::Decode {
                error: DecodeError::UnsupportedApiVersion(27),
                ..
            })
        ));
    }
}

// ------------------------------------------------------------------------------------------

mod never_panics {
    use super::*;
    use proptest::prelude::*;

    fn any_api() -> impl Strategy<Value = ApiVersion> {
        proptest::sample::select(ApiVersion::ALL.to_vec())
    }

    /// The version and start offset the `decode_buffer` fuzz target picks from an input's first
    /// byte (`fuzz/fuzz_targets/decode_buffer.rs`): bits 0–2 skip 0–7 bytes, bits 3–7 index
    /// [`ApiVersion::ALL`] (modulo its length).
    fn fuzz_selection(sel: u8) -> (ApiVersion, usize) {
        let api = ApiVersion::ALL[usize::from(sel >> 3) % ApiVersion::ALL.len()];
        (api, usize::from(sel & 7))
    }

    /// What the `decode_buffer` fuzz target does with `buf` under `api`.
    fn fuzz_decode_buffer(name: &str, buf: &[u8], api: ApiVersion) {
        if let Ok(d) = decode(buf, api) {
            let used: usize = d.records.iter().map(|r| r.size).sum();
            assert_eq!(used + d.trailing_zero_bytes, buf.len(), "{name} {api}");
        }
        let mut m = meter();
        let opts = CuptiOptions {
            api,
            ..CuptiOptions::default()
        };
        if meter_buffer(&mut m, "fuzz.bin", buf, &opts).is_ok() {
            let _ = m.finish();
        }
    }

    /// Inputs the fuzz targets saved (`tests/data/fuzz/<target>-<hash>.bin`), replayed the
    /// way the targets run them; `decode_buffer` inputs also with every version and start
    /// offset (the selector byte's meaning changed when 13.0 was added).
    #[test]
    fn fuzz_artifacts_replay() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz");
        let mut n = 0;
        for entry in ok(std::fs::read_dir(&dir)) {
            let path = ok(entry).path();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let data = ok(std::fs::read(&path));
            if name.starts_with("decode_buffer-") {
                let Some((&sel, rest)) = data.split_first() else {
                    continue;
                };
                let (api, skip) = fuzz_selection(sel);
                fuzz_decode_buffer(&name, &rest[skip.min(rest.len())..], api);
                for api in ApiVersion::ALL {
                    for skip in 0..8 {
                        fuzz_decode_buffer(&name, &rest[skip.min(rest.len())..], api);
                    }
                }
                n += 1;
            } else if name.starts_with("gmr_reader-") {
                let mut m = meter();
                if meter_gmr(&mut m, "fuzz.gmr", &data, &CuptiOptions::default()).is_ok() {
                    let _ = m.finish();
                }
                n += 1;
            }
        }
        assert!(n > 0, "no fuzz artifacts in {}", dir.display());
    }

    /// Every version is reachable from the fuzz target's selector byte, and each seed in
    /// `fuzz/seeds/decode_buffer/crafted_<api>.bin` selects the version it names and decodes.
    #[test]
    fn fuzz_selector_and_seeds() {
        let reachable: BTreeSet<ApiVersion> = (0..=u8::MAX).map(|s| fuzz_selection(s).0).collect();
        assert_eq!(reachable.len(), ApiVersion::ALL.len());
        let seeds =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/decode_buffer");
        for api in ApiVersion::ALL {
            let path = seeds.join(format!("crafted_{}.bin", api.cupti_api_version()));
            let data = ok(std::fs::read(&path));
            let Some((&sel, rest)) = data.split_first() else {
                panic!("{} is empty", path.display());
            };
            let (picked, skip) = fuzz_selection(sel);
            assert_eq!((picked, skip), (api, 0), "{}", path.display());
            let d = ok(decode(rest, api));
            assert!(d.records.len() > 20, "{}", path.display());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn decode_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..2048),
                                  api in any_api()) {
            let d = decode(&bytes, api);
            // The streaming walk yields the same records, or the same first error.
            let walked: Result<Vec<_>, _> = gpumeter_cupti::Walk::new(&bytes, api).collect();
            prop_assert_eq!(walked, d.map(|d| d.records));
            let _ = meter_buffer(&mut meter(), "f.bin", &bytes,
                                 &CuptiOptions { api, ..CuptiOptions::default() });
        }

        /// Valid kinds with random contents always walk, and meter without panicking.
        #[test]
        fn valid_kinds_random_contents(kinds in proptest::collection::vec((any::<u8>(), any::<u64>()), 0..40),
                                       api in any_api()) {
            let layouts = api.layouts();
            let mut b = Buf::new(api);
            for (k, seed) in &kinds {
                let l = &layouts[*k as usize % layouts.len()];
                let at = b.rec(l.kind, &[]);
                let mut x = *seed | 1;
                for byte in &mut b.bytes[at + 4..] {
                    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                    *byte = x as u8;
                }
            }
            let d = decode(&b.bytes, api);
            prop_assert!(d.is_ok());
            prop_assert_eq!(d.map(|d| d.records.len()).unwrap_or(0), kinds.len());
            let _ = meter_buffer(&mut meter(), "r.bin", &b.bytes,
                                 &CuptiOptions { api, ..CuptiOptions::default() });
        }
    }
}

/// MEMORY2 (`memory_byte_ns`), green contexts (the partition cap) and INSTRUCTION_EXECUTION
/// (`warp_instructions`) from a buffer, in every API version that has the kinds.
#[test]
fn memory_green_contexts_and_instruction_counts_are_metered() {
    for api in ApiVersion::ALL {
        let mut b = Buf::new(api);
        b.rec(
            ActivityKind::DEVICE,
            &[
                ("id", 0),
                ("numMultiprocessors", 100),
                ("computeCapabilityMajor", 9),
            ],
        );
        b.rec(
            ActivityKind::CONTEXT,
            &[
                ("contextId", 5),
                ("deviceId", 0),
                ("isGreenContext", 1),
                ("numMultiprocessors", 30),
            ],
        );
        for (corr, pid) in [(11, 1), (12, 2), (13, 1)] {
            b.rec(
                ActivityKind::RUNTIME,
                &[("correlationId", corr), ("processId", pid)],
            );
        }
        // alice (pid 1): 50 blocks in green context 5 (30 SMs) → holds 30; bob (pid 2): 90
        // blocks on the device. 30 + 90 = 120 > 100 SMs: alice 25, bob 75 SM per ns. Without
        // the partition alice would hold 50 and get 50·100/140.
        for (ctx, grid, corr) in [(5, 50, 11), (1, 90, 12)] {
            b.rec(
                ActivityKind::CONCURRENT_KERNEL,
                &[
                    ("start", T0.into()),
                    ("end", (T0 + 1000).into()),
                    ("gridX", grid),
                    ("gridY", 1),
                    ("gridZ", 1),
                    ("blockX", 128),
                    ("blockY", 1),
                    ("blockZ", 1),
                    ("correlationId", corr),
                    ("contextId", ctx),
                    ("deviceId", 0),
                ],
            );
        }
        let has_instructions = api
            .layouts()
            .into_iter()
            .any(|l| l.kind == ActivityKind::INSTRUCTION_EXECUTION);
        if has_instructions {
            for (corr, n) in [(11, 700), (11, 300), (12, 5)] {
                b.rec(
                    ActivityKind::INSTRUCTION_EXECUTION,
                    &[("correlationId", corr), ("executed", n)],
                );
            }
        }
        let mem = |op: i128, kind: i128, addr: i128, t: u64| {
            vec![
                ("memoryOperationType", op),
                ("memoryKind", kind),
                ("address", addr),
                ("bytes", 4096),
                ("timestamp", i128::from(t)),
                ("deviceId", 0),
                ("contextId", 5),
                ("correlationId", 13),
            ]
        };
        b.rec(ActivityKind::MEMORY2, &mem(1, 3, 0x100, T0 + 100));
        b.rec(ActivityKind::MEMORY2, &mem(2, 3, 0x100, T0 + 600));
        b.rec(ActivityKind::MEMORY2, &mem(1, 2, 0x900, T0 + 100)); // pinned host: skipped
        b.rec(ActivityKind::MEMORY2, &mem(2, 3, 0x200, T0 + 700)); // never allocated: loss
        let mut m = meter();
        let mut tm = TenantMap::default();
        tm.pid.insert(1, tn("alice"));
        tm.pid.insert(2, tn("bob"));
        m.set_tenant_map(tm);
        let opts = CuptiOptions {
            api,
            ..CuptiOptions::default()
        };
        let s = ok(meter_buffer(&mut m, "mem.bin", &b.bytes, &opts));
        assert_eq!((s.memory_events, s.green_contexts), (3, 1), "{api}");
        let r = finish(m);
        let key = format!("{}#0", &s.sha256[..16]);
        let of = |tenant: &str, meter: MeterKind| -> u128 {
            r.totals
                .iter()
                .filter(|t| t.tenant == tenant && t.meter == meter && t.device_key == key)
                .map(|t| t.quantity.0)
                .sum()
        };
        assert_eq!(of("alice", MeterKind::SmNs), 25_000, "{api}");
        assert_eq!(of("bob", MeterKind::SmNs), 75_000, "{api}");
        // Memory: the allocation's processId is 0, so the API record of correlation 13 gives
        // pid 1.
        assert_eq!(of("alice", MeterKind::MemoryByteNs), 4096 * 500, "{api}");
        assert_eq!(r.lost(&key, "release_without_allocation"), 1, "{api}");
        assert_eq!(r.records.skipped.get("memory2_host"), Some(&1), "{api}");
        if has_instructions {
            assert_eq!(s.kernels_with_instructions, 2, "{api}");
            assert_eq!(of("alice", MeterKind::WarpInstructions), 1000, "{api}");
            assert_eq!(of("bob", MeterKind::WarpInstructions), 5, "{api}");
            assert_warns(&r, "instrumented run");
        }
    }
}

/// The real H200 recording (`examples/data/h200-cuda13-smoke.gmr`, CUPTI 13.0): the CUDA C
/// workload's `cudaMalloc`/`cudaFree` MEMORY2 records, paired here independently of the meter,
/// give exactly the `memory_byte_ns` the meter reports, and nothing stays open.
#[test]
fn the_h200_recording_meters_memory_byte_ns_from_its_memory2_records() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/data/h200-cuda13-smoke.gmr");
    let bytes = ok(std::fs::read(&path));
    let file = ok(read_gmr(&bytes));
    let api = ok(ApiVersion::from_cupti(file.header.cupti_api_version));
    let mut allocs: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let mut expected: u128 = 0;
    let mut pairs = 0;
    for f in &file.frames {
        if let Frame::ActivityBuffer(b) = &f.frame {
            for r in ok(decode(b, api)).records {
                if let Record::Memory(m) = r.record {
                    match m.operation.raw() {
                        1 => {
                            allocs.insert(m.address, (m.timestamp, m.bytes));
                        }
                        2 => {
                            let (t, n) = allocs.remove(&m.address).expect("allocated before");
                            expected += u128::from(n) * u128::from(m.timestamp - t);
                            pairs += 1;
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    // The workload allocates x and y (4 MiB each) and frees both.
    assert_eq!((pairs, allocs.len()), (2, 0));
    let mut m = meter();
    ok(meter_gmr(
        &mut m,
        "h200.gmr",
        &bytes,
        &CuptiOptions::default(),
    ));
    let r = finish(m);
    let key = r.devices[0].device_key.clone();
    assert!(expected > 0);
    assert_eq!(r.device_total(&key, MeterKind::MemoryByteNs), expected);
    assert!(r.open_allocations.is_empty());
}

fn example(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/data")
        .join(name);
    ok(std::fs::read(path))
}

/// A real green-context recording (`scripts/gpu-smoke.sh`, H200, CUPTI 13.0): 20 kernels of
/// 16 384 blocks, one after another, in a green context of 16 of the H200's 132 SMs. The
/// CONTEXT record declares the partition, so each kernel holds 16 SMs: sm_ns = 16 × kernel_ns
/// exactly (the device cap alone would give 132 ×). Its energy frames give energy_mj = the
/// counter's last minus first sample, all of it to the one tenant with sm_ns or to idle.
#[test]
fn the_h200_green_context_recording_caps_sm_ns_at_the_partition() {
    let bytes = example("h200-cuda13-green-context.gmr");
    let mut m = meter();
    let s = ok(meter_gmr(
        &mut m,
        "green.gmr",
        &bytes,
        &CuptiOptions::default(),
    ));
    assert_eq!(s.green_contexts, 1);
    let r = finish(m);
    let key = r.devices[0].device_key.clone();
    assert_eq!(r.devices[0].sm_count, Some(132));
    let kernel_ns = r.device_total(&key, MeterKind::KernelNs);
    assert_eq!(r.device_total(&key, MeterKind::KernelLaunches), 20);
    assert!(kernel_ns > 0);
    assert_eq!(r.device_total(&key, MeterKind::SmNs), 16 * kernel_ns);
    let file = ok(read_gmr(&bytes));
    let samples: Vec<(u64, u64)> = file
        .frames
        .iter()
        .filter_map(|f| match &f.frame {
            Frame::Energy(e) => Some((e.timestamp_ns, e.energy_mj)),
            _ => None,
        })
        .collect();
    assert!(samples.len() >= 2, "{samples:?}");
    // The recorded telemetry replays the same samples through the NVML trait.
    use gpumeter_nvml::Telemetry as _;
    let t = file.telemetry();
    let gpus = ok(t.gpus());
    assert_eq!(gpus.len(), 1);
    assert_eq!(gpus[0].name.as_deref(), Some("NVIDIA H200"));
    let mut replayed = Vec::new();
    while let Ok(r) = t.energy(gpus[0].index) {
        replayed.push((r.timestamp_ns, r.energy_mj));
    }
    assert_eq!(replayed, samples);
    let (first, last) = (samples[0].1, samples[samples.len() - 1].1);
    assert!(last > first);
    assert_eq!(
        r.device_total(&key, MeterKind::EnergyMj),
        u128::from(last - first)
    );
}

/// A real instrumented recording (`gpumeter record --instructions`, H200, CUPTI 13.0): the CUDA
/// C smoke workload with 50 iterations, 106 launches. Every launch has its SASS-metrics frame;
/// warp_instructions is their sum per kernel (gm_smoke_add 589 824 per launch: 4096 blocks ×
/// 8 warps × 18 instructions), and the report says the run was instrumented.
#[test]
fn the_h200_instrumented_recording_meters_warp_instructions_per_launch() {
    let bytes = example("h200-cuda13-instructions.gmr");
    let file = ok(read_gmr(&bytes));
    assert!(file.header.instrumented);
    let mut per_launch: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    let mut frames = 0;
    let mut total: u128 = 0;
    for f in &file.frames {
        if let Frame::Instructions(c) = &f.frame {
            frames += 1;
            total += u128::from(c.total());
            for func in &c.functions {
                per_launch
                    .entry(func.name.clone())
                    .or_default()
                    .insert(func.warp_instructions);
            }
        }
    }
    assert_eq!(frames, 106);
    assert_eq!(per_launch["gm_smoke_add"], BTreeSet::from([589_824]));
    assert_eq!(per_launch["gm_smoke_scale"], BTreeSet::from([524_288]));
    assert_eq!(per_launch["gm_smoke_fill"], BTreeSet::from([458_752]));
    let mut m = meter();
    let s = ok(meter_gmr(
        &mut m,
        "instr.gmr",
        &bytes,
        &CuptiOptions::default(),
    ));
    assert_eq!(s.kernels_with_instructions, 106);
    let r = finish(m);
    let key = r.devices[0].device_key.clone();
    assert_eq!(r.device_total(&key, MeterKind::KernelLaunches), 106);
    assert_eq!(r.device_total(&key, MeterKind::WarpInstructions), total);
    assert_eq!(total, 50 * 589_824 + 50 * 524_288 + 6 * 458_752);
    assert!(r.devices[0].not_meterable.is_empty(), "{:?}", r.devices[0]);
    assert_warns(&r, "instrumented run");
    // A recording without PM samples does not speak of sm_active_ns (its text is the one it
    // had before issue 16: the golden reports hold it).
    assert!(
        !r.warnings.iter().any(|w| w.contains("sm_active_ns")),
        "{:?}",
        r.warnings
    );
}

/// A MIG instance is its own device: its DEVICE record (`isMigEnabled`, `migUuid`,
/// `numMultiprocessors` = the instance's SMs) keys it `MIG-<uuid>` and caps `sm_ns` at the
/// instance's SMs, in every API version; two instances of one GPU are two devices.
#[test]
fn a_mig_instance_is_a_device_capped_at_its_own_sms() {
    for api in ApiVersion::ALL {
        let mut bufs = Vec::new();
        for (mig, sms) in [(0x11_i128, 16), (0x22, 32)] {
            let mut b = Buf::new(api);
            b.rec(
                ActivityKind::DEVICE,
                &[
                    ("id", 0),
                    ("numMultiprocessors", sms),
                    ("isMigEnabled", 1),
                    ("gpuInstanceId", mig >> 4),
                    ("computeInstanceId", 0),
                    ("uuid", 0x0123_4567_89ab_cdef_0123_4567_89ab_cdef),
                    ("migUuid", mig),
                ],
            );
            b.kernel(T0, T0 + 1000, 100, 1);
            bufs.push(b.bytes);
        }
        let mut m = meter();
        let opts = CuptiOptions {
            api,
            ..CuptiOptions::default()
        };
        for (i, bytes) in bufs.iter().enumerate() {
            ok(meter_buffer(&mut m, &format!("mig{i}.bin"), bytes, &opts));
        }
        let r = finish(m);
        assert_eq!(r.devices.len(), 2, "{api}");
        let mut caps: Vec<(u32, u128)> = r
            .devices
            .iter()
            .map(|d| {
                assert!(d.device_key.starts_with("MIG-"), "{api}: {}", d.device_key);
                (
                    d.sm_count.unwrap_or(0),
                    r.device_total(&d.device_key, MeterKind::SmNs),
                )
            })
            .collect();
        caps.sort_unstable();
        assert_eq!(caps, vec![(16, 16 * 1000), (32, 32 * 1000)], "{api}");
    }
}

/// Issue 5 review cases: several recordings of one GPU, per-process contexts and addresses,
/// graph launches with instruction counts, allocations of a finished recording.
mod merged_recordings {
    use super::*;
    use gpumeter_cupti::{meter_sources, CuptiFormat, CuptiInput};

    pub(super) const API: ApiVersion = ApiVersion::Cupti12_8;

    pub(super) fn kernel(b: &mut Buf, start: u64, grid: i32, corr: u32, ctx: u32, name_ptr: u64) {
        b.rec(
            ActivityKind::CONCURRENT_KERNEL,
            &[
                ("start", start.into()),
                ("end", (start + 1000).into()),
                ("gridX", grid.into()),
                ("gridY", 1),
                ("gridZ", 1),
                ("blockX", 128),
                ("blockY", 1),
                ("blockZ", 1),
                ("correlationId", corr.into()),
                ("contextId", ctx.into()),
                ("name", name_ptr.into()),
                ("graphNodeId", i128::from(name_ptr)),
            ],
        );
    }

    /// A finished (or not) recording of process `pid` with one buffer and these frames after it.
    pub(super) fn gmr(pid: u32, b: &Buf, more: Vec<Frame>, finished: bool) -> Vec<u8> {
        let mut h = gmr_format::header(26);
        h.process_id = pid;
        let mut frames = vec![Frame::ActivityBuffer(b.bytes.clone())];
        frames.extend(more);
        gmr_format::write(&h, &frames, finished).0
    }

    pub(super) fn meter_all(
        files: &[(&str, &[u8])],
        map: &[(u32, &str)],
    ) -> (UsageReport, Vec<gpumeter_cupti::CuptiSummary>) {
        let mut m = meter();
        let mut tm = TenantMap::default();
        for (p, t) in map {
            tm.pid.insert(*p, tn(t));
        }
        m.set_tenant_map(tm);
        let inputs: Vec<CuptiInput<'_>> = files
            .iter()
            .map(|(name, bytes)| CuptiInput {
                name,
                bytes,
                format: CuptiFormat::Gmr,
            })
            .collect();
        let s = ok(meter_sources(&mut m, &inputs, &CuptiOptions::default()));
        (finish(m), s)
    }

    pub(super) const GPU: &str = "GPU-74e128b2-90b6-b409-07c8-33bee5ff6f88";

    pub(super) fn of(r: &UsageReport, tenant: &str, meter: MeterKind) -> u128 {
        r.totals
            .iter()
            .filter(|t| t.tenant == tenant && t.meter == meter)
            .map(|t| t.quantity.0)
            .sum()
    }

    #[test]
    fn recordings_of_one_gpu_merge_in_time_order_whatever_their_order() {
        // A: kernels at T0 and T0 + 300 s; B: a kernel and an allocation at T0 + 10 s.
        let mut a = Buf::new(API);
        kernel(&mut a, T0, 1, 1, 1, 0);
        kernel(&mut a, T0 + 300_000_000_000, 1, 2, 1, 0);
        let mut b = Buf::new(API);
        kernel(&mut b, T0 + 10_000_000_000, 1, 1, 1, 0);
        let (ga, gb) = (gmr(1, &a, vec![], false), gmr(2, &b, vec![], false));
        let map = [(1, "alice"), (2, "bob")];
        let (r1, _) = meter_all(&[("a.gmr", &ga), ("b.gmr", &gb)], &map);
        let (r2, _) = meter_all(&[("b.gmr", &gb), ("a.gmr", &ga)], &map);
        for r in [&r1, &r2] {
            assert!(r.loss.is_empty(), "{:?}", r.loss);
            assert_eq!(of(r, "alice", MeterKind::KernelLaunches), 2);
            assert_eq!(of(r, "bob", MeterKind::KernelLaunches), 1);
        }
        assert_eq!(r1.usage, r2.usage);
    }

    #[test]
    fn a_green_context_of_one_process_does_not_cap_another_process_context_of_the_same_id() {
        let green = |b: &mut Buf| {
            b.rec(
                ActivityKind::CONTEXT,
                &[
                    ("contextId", 2),
                    ("deviceId", 0),
                    ("isGreenContext", 1),
                    ("numMultiprocessors", 16),
                ],
            );
        };
        let mut a = Buf::new(API);
        green(&mut a);
        kernel(&mut a, T0, 132, 1, 2, 0);
        let mut b = Buf::new(API);
        kernel(&mut b, T0 + 5000, 132, 1, 2, 0);
        let (ga, gb) = (gmr(1, &a, vec![], false), gmr(2, &b, vec![], false));
        let (r, _) = meter_all(
            &[("a.gmr", &ga), ("b.gmr", &gb)],
            &[(1, "alice"), (2, "bob")],
        );
        assert_eq!(of(&r, "alice", MeterKind::SmNs), 16 * 1000);
        assert_eq!(of(&r, "bob", MeterKind::SmNs), 132 * 1000);
    }

    #[test]
    fn a_graph_launch_gives_each_kernel_its_function_count_once() {
        // Correlation 5 launched a graph of two kernels (k1, k2); one frame lists both.
        let mut b = Buf::new(API);
        kernel(&mut b, T0, 1, 5, 1, 0x10);
        kernel(&mut b, T0 + 2000, 1, 5, 1, 0x20);
        // Correlation 6: two kernels of the same function, INSTRUCTION_EXECUTION 7 in all.
        kernel(&mut b, T0 + 4000, 1, 6, 1, 0x10);
        kernel(&mut b, T0 + 6000, 1, 6, 1, 0x10);
        for n in [3, 4] {
            b.rec(
                ActivityKind::INSTRUCTION_EXECUTION,
                &[("correlationId", 6), ("executed", n)],
            );
        }
        let mut names = StringTable::new();
        names.insert(0x10, "k1");
        names.insert(0x20, "k2");
        let counts = InstructionCounts {
            correlation_id: 5,
            device_id: 0,
            context_id: 1,
            functions: vec![
                FunctionInstructions {
                    name: "k1".into(),
                    warp_instructions: 100,
                },
                FunctionInstructions {
                    name: "k2".into(),
                    warp_instructions: 200,
                },
            ],
        };
        let mut h = gmr_format::header(26);
        h.instrumented = true;
        let frames = vec![
            Frame::StringTable(names),
            Frame::ActivityBuffer(b.bytes.clone()),
            Frame::Instructions(counts),
        ];
        let bytes = gmr_format::write(&h, &frames, true).0;
        let (r, s) = meter_all(&[("graph.gmr", &bytes)], &[]);
        assert_eq!(s[0].kernels_with_instructions, 4);
        assert_eq!(r.device_total(GPU, MeterKind::WarpInstructions), 300 + 7);
    }

    #[test]
    fn a_finished_recording_closes_its_allocations_at_its_end() {
        let alloc = |b: &mut Buf, t: u64| {
            b.rec(
                ActivityKind::MEMORY2,
                &[
                    ("memoryOperationType", 1),
                    ("memoryKind", 3),
                    ("address", 0x7000),
                    ("bytes", 1000),
                    ("timestamp", t.into()),
                ],
            );
        };
        let mut b = Buf::new(API);
        alloc(&mut b, T0 + 100);
        kernel(&mut b, T0, 1, 1, 1, 0);
        // Finished: the process exited at the recording's end (T0 + 1000, the kernel's end).
        let done = gmr(1, &b, vec![], true);
        let (r, s) = meter_all(&[("done.gmr", &done)], &[]);
        assert_eq!(s[0].allocations_closed_at_end, 1);
        assert_eq!(r.device_total(GPU, MeterKind::MemoryByteNs), 1000 * 900);
        assert!(r.open_allocations.is_empty());
        // A later recording of another process does not extend it.
        let mut later = Buf::new(API);
        kernel(&mut later, T0 + 3_600_000_000_000, 1, 1, 1, 0);
        let gl = gmr(2, &later, vec![], true);
        let (r, _) = meter_all(&[("done.gmr", &done), ("later.gmr", &gl)], &[]);
        assert_eq!(r.device_total(GPU, MeterKind::MemoryByteNs), 1000 * 900);
        // Unfinished (the producer died): held to the report's end and listed.
        let torn = gmr(1, &b, vec![], false);
        let (r, s) = meter_all(&[("torn.gmr", &torn)], &[]);
        assert_eq!(s[0].allocations_closed_at_end, 0);
        assert_eq!(r.open_allocations.len(), 1);

        // A record the meter refuses (30 days long) does not move the recording's end.
        let mut bad = Buf::new(API);
        alloc(&mut bad, T0 + 100);
        kernel(&mut bad, T0, 1, 1, 1, 0);
        bad.rec(
            ActivityKind::CONCURRENT_KERNEL,
            &[
                ("start", (T0 + 1000).into()),
                ("end", (T0 + 30 * 86_400_000_000_000).into()),
                ("correlationId", 2),
            ],
        );
        let g = gmr(1, &bad, vec![], true);
        let (r, _) = meter_all(&[("bad.gmr", &g)], &[]);
        assert_eq!(r.device_total(GPU, MeterKind::MemoryByteNs), 1000 * 900);
        assert_eq!(r.lost(GPU, "too_long"), 1);

        // The process's allocations carried in by --opening end with its finished recording.
        let open = r1_open(&torn);
        let mut later = Buf::new(API);
        kernel(&mut later, T0 + 5000, 1, 1, 1, 0);
        let gl = gmr(1, &later, vec![], true);
        let mut m = meter();
        ok(m.set_opening(&open).map_err(|e| e.to_string()));
        let inputs = [CuptiInput {
            name: "later.gmr",
            bytes: &gl,
            format: CuptiFormat::Gmr,
        }];
        ok(meter_sources(&mut m, &inputs, &CuptiOptions::default()));
        let r = finish(m);
        assert!(r.open_allocations.is_empty(), "{:?}", r.open_allocations);
        // Held from the first report's end (T0 + 1000) to the later recording's (T0 + 6000).
        assert_eq!(r.device_total(GPU, MeterKind::MemoryByteNs), 1000 * 5000);
    }

    /// The open allocations of a report of `bytes` alone.
    fn r1_open(bytes: &[u8]) -> Vec<gpumeter_core::OpenAllocation> {
        let (r, _) = meter_all(&[("first.gmr", bytes)], &[]);
        r.open_allocations
    }

    #[test]
    fn raw_buffers_give_the_same_report_in_any_order_even_with_ties() {
        // c1 allocates 0x1000 at the ns c2 releases it, and the reverse for 0x2000.
        let buf = |ops: &[(i128, i128, u64)]| {
            let mut b = Buf::new(API);
            b.rec(
                ActivityKind::DEVICE,
                &[
                    ("id", 0),
                    ("numMultiprocessors", 132),
                    ("uuid", 0x74e1_28b2_90b6_b409_07c8_33be_e5ff_6f88),
                ],
            );
            kernel(&mut b, T0, 1, 1, 1, 0);
            for &(op, addr, t) in ops {
                b.rec(
                    ActivityKind::MEMORY2,
                    &[
                        ("memoryOperationType", op),
                        ("memoryKind", 3),
                        ("address", addr),
                        ("bytes", 10),
                        ("timestamp", t.into()),
                        ("processId", 7),
                    ],
                );
            }
            b.bytes
        };
        let c1 = buf(&[(1, 0x1000, T0 + 500), (2, 0x2000, T0 + 700)]);
        let c2 = buf(&[
            (1, 0x2000, T0 + 100),
            (2, 0x1000, T0 + 500),
            (1, 0x2000, T0 + 700),
        ]);
        let run = |order: [(&str, &[u8]); 2]| {
            let mut m = meter();
            let inputs: Vec<CuptiInput<'_>> = order
                .iter()
                .map(|(name, bytes)| CuptiInput {
                    name,
                    bytes,
                    format: CuptiFormat::Cupti,
                })
                .collect();
            ok(meter_sources(&mut m, &inputs, &CuptiOptions::default()));
            finish(m)
        };
        let a = run([("c1.bin", &c1), ("c2.bin", &c2)]);
        let b = run([("c2.bin", &c2), ("c1.bin", &c1)]);
        assert_eq!(a.usage, b.usage);
        assert_eq!(a.loss, b.loss);
        assert_eq!(a.open_allocations, b.open_allocations);
    }
}

/// Two real recordings of one H200 made one after the other: metered together, the energy
/// between them (observed by neither) is not billed, so together they bill what each bills
/// alone; and the result does not depend on their order.
#[test]
fn energy_between_two_recordings_of_one_gpu_is_not_billed() {
    use gpumeter_cupti::{meter_sources, CuptiFormat, CuptiInput};
    let green = example("h200-cuda13-green-context.gmr");
    let instr = example("h200-cuda13-instructions.gmr");
    let energy = |files: &[(&str, &[u8])]| -> (u128, UsageReport) {
        let mut m = meter();
        let inputs: Vec<CuptiInput<'_>> = files
            .iter()
            .map(|(name, bytes)| CuptiInput {
                name,
                bytes,
                format: CuptiFormat::Gmr,
            })
            .collect();
        ok(meter_sources(&mut m, &inputs, &CuptiOptions::default()));
        let r = finish(m);
        let e = r
            .totals
            .iter()
            .filter(|t| t.meter == MeterKind::EnergyMj)
            .map(|t| t.quantity.0)
            .sum();
        (e, r)
    };
    let (a, _) = energy(&[("green.gmr", &green)]);
    let (b, _) = energy(&[("instr.gmr", &instr)]);
    let (ab, r1) = energy(&[("green.gmr", &green), ("instr.gmr", &instr)]);
    let (ba, r2) = energy(&[("instr.gmr", &instr), ("green.gmr", &green)]);
    assert!(a > 0 && b > 0);
    assert_eq!((ab, ba), (a + b, a + b));
    assert_eq!(r1.usage, r2.usage);
    assert_warns(&r1, "between recordings");
}

/// A real instrumented recording of two host threads launching into one context at once
/// (`scripts/gpu-smoke.sh`, H200, CUPTI 13.0): every launch has its own frame and the same
/// count (491 520 = 32 768 warps × 15), and the report's warp_instructions is their sum.
#[test]
fn the_h200_two_thread_instrumented_recording_keeps_each_launch_count_apart() {
    let bytes = example("h200-cuda13-instructions-2threads.gmr");
    let file = ok(read_gmr(&bytes));
    let counts: Vec<u64> = file
        .frames
        .iter()
        .filter_map(|f| match &f.frame {
            Frame::Instructions(c) => Some(c.total()),
            _ => None,
        })
        .collect();
    assert_eq!(counts.len(), 100);
    assert!(counts.iter().all(|&c| c == 491_520), "{counts:?}");
    let mut m = meter();
    ok(meter_gmr(
        &mut m,
        "mt.gmr",
        &bytes,
        &CuptiOptions::default(),
    ));
    let r = finish(m);
    let key = r.devices[0].device_key.clone();
    assert_eq!(r.device_total(&key, MeterKind::KernelLaunches), 100);
    assert_eq!(
        r.device_total(&key, MeterKind::WarpInstructions),
        100 * 491_520
    );
}

/// A tenant name known to be valid (a test's fixed name).
fn tn(name: &str) -> gpumeter_core::TenantName {
    match gpumeter_core::TenantName::parse(name) {
        Ok(t) => t,
        Err(e) => panic!("{name:?}: {e}"),
    }
}

/// Issue 16: CUPTI PM-sampling frames (type 9) in a recording reach the meter.
mod op_frames;

mod pm_frames {
    use super::merged_recordings::{gmr, kernel, meter_all, of, API, GPU};
    use super::*;

    fn sample(start: u64, active: u64, read: u64, write: u64, overflow: bool) -> PmSample {
        PmSample {
            start_ns: start,
            end_ns: start + 1000,
            sm_active_cycles: Some(active),
            sm_elapsed_cycles: Some(1000),
            dram_read_bytes: Some(read),
            dram_write_bytes: Some(write),
            overflow,
        }
    }

    /// Device 0's samples: [T0, T0 + 1000) while alice's kernel holds all 132 SMs (99 000
    /// active SM cycles over 1 000 elapsed: 99 000 SM·ns; 10 000 DRAM bytes), then
    /// [T0 + 1000, T0 + 2000) with no kernel (13 200 SM·ns, 100 bytes) after an overflow.
    fn frames(device_id: u32) -> Frame {
        Frame::PmSamples(PmSamples {
            device_id,
            samples: vec![
                sample(T0, 99_000, 6_000, 4_000, false),
                sample(T0 + 1000, 13_200, 100, 0, true),
            ],
        })
    }

    /// Samples written after the records they overlap (the collector decodes them later) are
    /// metered, not `late`: each interval's measured quantity goes to the tenant whose kernel
    /// ran in it, an interval without a kernel to idle, and an overflow is loss. The frame's
    /// place in the file does not change the report.
    ///
    /// Needs the meter's PM-sample metering (`Meter::push_pm_sample`, issue 16 item 2).
    #[test]
    fn pm_samples_are_apportioned_to_the_tenants_with_kernels() {
        let mut b = Buf::new(API);
        kernel(&mut b, T0, 200, 1, 1, 0);
        let after = gmr(1, &b, vec![frames(0)], true);
        let mut h = gmr_format::header(26);
        h.process_id = 1;
        let before = gmr_format::write(
            &h,
            &[frames(0), Frame::ActivityBuffer(b.bytes.clone())],
            true,
        )
        .0;
        for bytes in [&after, &before] {
            let (r, s) = meter_all(&[("pm.gmr", bytes)], &[(1, "alice")]);
            assert_eq!(s[0].pm_samples, 2);
            assert_eq!(r.device_total(GPU, MeterKind::SmNs), 132_000);
            assert_eq!(r.device_total(GPU, MeterKind::SmActiveNs), 99_000 + 13_200);
            assert_eq!(of(&r, "alice", MeterKind::SmActiveNs), 99_000);
            assert_eq!(of(&r, gpumeter_core::IDLE, MeterKind::SmActiveNs), 13_200);
            assert_eq!(r.device_total(GPU, MeterKind::DramBytes), 10_100);
            assert_eq!(of(&r, "alice", MeterKind::DramBytes), 10_000);
            assert_eq!(of(&r, gpumeter_core::IDLE, MeterKind::DramBytes), 100);
            assert_eq!(r.lost(GPU, "pm_sample_overflow"), 1);
            assert_eq!(r.lost(GPU, "late"), 0);
            assert_warns(&r, "overflow");
        }
    }

    /// PM samples of a device the recording does not describe are not metered: one warning
    /// counts them and names the ordinal; the summary counts every sample read.
    #[test]
    fn pm_samples_of_an_unknown_device_are_warned_not_metered() {
        let mut b = Buf::new(API);
        kernel(&mut b, T0, 200, 1, 1, 0);
        let bytes = gmr(1, &b, vec![frames(0), frames(5)], true);
        let (r, s) = meter_all(&[("pm.gmr", &bytes)], &[(1, "alice")]);
        assert_eq!(s[0].pm_samples, 4);
        assert_eq!(s[0].device_keys, [GPU.to_string()]);
        assert_eq!(r.devices.len(), 1);
        assert_warns(
            &r,
            "2 PM samples name a device the recording does not describe (CUDA ordinal 5)",
        );
        // Their own code, not the energy samples' one.
        let codes: Vec<_> = r
            .warnings
            .iter()
            .filter(|w| w.message().contains("PM samples name a device"))
            .map(|w| w.code().clone())
            .collect();
        assert_eq!(codes, [gpumeter_core::WarningCode::UnplacedPmSamples]);
        // Device 0's samples are no reason for that warning.
        let only = gmr(1, &b, vec![frames(0)], true);
        let (r, _) = meter_all(&[("pm.gmr", &only)], &[(1, "alice")]);
        assert!(
            !r.warnings.iter().any(|w| w.contains("PM samples name")),
            "{:?}",
            r.warnings
        );
    }

    /// In a chain of reports (`--opening`), how far a report read a recording's PM samples is
    /// noted apart from how far it read its records (`<recording>#pm`): samples and buffers
    /// reach a growing file at different times, and one cut for both would leave out, in the
    /// next report, what was written after this one yet ends before the cut.
    #[test]
    fn pm_sample_ends_count_in_how_far_a_report_read_the_recording() {
        let mut b = Buf::new(API);
        kernel(&mut b, T0, 200, 1, 1, 0);
        let (r, _) = meter_all(&[("pm.gmr", &gmr(1, &b, vec![frames(0)], false))], &[]);
        let ends = &r.extensions.recordings;
        assert_eq!(ends.len(), 2, "{ends:?}");
        let (pm, records): (Vec<_>, Vec<_>) =
            ends.iter().partition(|e| e.recording.ends_with("#pm"));
        assert_eq!((pm.len(), records.len()), (1, 1));
        assert_eq!(pm[0].recording, format!("{}#pm", records[0].recording));
        // The kernel ends at T0 + 1000; the second sample at T0 + 2000.
        assert!(
            records[0].device_ends[0].end.ends_with(":05.000001000Z"),
            "{:?}",
            records[0].device_ends
        );
        assert!(
            pm[0].device_ends[0].end.ends_with(":05.000002000Z"),
            "{:?}",
            pm[0].device_ends
        );
        let (r, _) = meter_all(&[("k.gmr", &gmr(1, &b, vec![], false))], &[]);
        assert_eq!(r.extensions.recordings.len(), 1);
        assert!(r.extensions.recordings[0].device_ends[0]
            .end
            .ends_with(":05.000001000Z"));
    }

    /// A report continuing a recording (`--opening` of a report that read it while it had
    /// only its first PM frame) leaves out the samples that report read and meters the rest.
    ///
    /// Needs the meter's PM-sample metering (`Meter::push_pm_sample`, issue 16 item 2).
    #[test]
    fn a_continued_recording_meters_only_the_pm_samples_not_read_before() {
        let mut b = Buf::new(API);
        kernel(&mut b, T0, 200, 1, 1, 0);
        let first = Frame::PmSamples(PmSamples {
            device_id: 0,
            samples: vec![sample(T0, 99_000, 6_000, 4_000, false)],
        });
        let second = Frame::PmSamples(PmSamples {
            device_id: 0,
            samples: vec![sample(T0 + 1000, 13_200, 100, 0, false)],
        });
        let early = gmr(1, &b, vec![first.clone()], false);
        let whole = gmr(1, &b, vec![first, second], true);
        let mut m = meter();
        ok(meter_gmr(
            &mut m,
            "rec.gmr",
            &early,
            &CuptiOptions::default(),
        ));
        let opening = finish(m);
        assert_eq!(opening.device_total(GPU, MeterKind::SmActiveNs), 99_000);
        let mut m = meter();
        ok(m.continue_from(&opening));
        ok(meter_gmr(
            &mut m,
            "rec.gmr",
            &whole,
            &CuptiOptions::default(),
        ));
        let r = finish(m);
        assert_eq!(r.device_total(GPU, MeterKind::SmNs), 0);
        assert_eq!(r.device_total(GPU, MeterKind::SmActiveNs), 13_200);
        assert_eq!(r.device_total(GPU, MeterKind::DramBytes), 100);
        // The kernel (and its memory event) and the first sample are counted as billed by the
        // opening report.
        assert_eq!(
            r.records.skipped.get("billed_by_opening_report"),
            Some(&3),
            "{:?}",
            r.warnings
        );
        assert_warns(
            &r,
            "1 work records, 1 memory events and 1 PM samples of recordings",
        );
    }

    /// Loss of `reason` on no device (the source's), and whether it is a lower bound.
    fn source_lost(r: &UsageReport, reason: &str) -> Vec<(u64, bool)> {
        r.loss
            .iter()
            .filter(|l| l.device.is_none() && l.reason == reason)
            .map(|l| (l.records, l.lower_bound))
            .collect()
    }

    /// `bytes` with its frame #`frame` (numbered from the first after the header) changed by
    /// `change` at payload byte `at`, its checksum made right again: a malformed frame.
    fn malformed(bytes: &[u8], frame: usize, at: usize, change: u8) -> Vec<u8> {
        let file = ok(read_gmr(bytes));
        let start = file.frames[frame].offset as usize;
        let mut bad = bytes.to_vec();
        bad[start + 12 + at] |= change;
        let len = u64::from_le_bytes(ok(bad[start + 4..start + 12].try_into())) as usize;
        let mut crc = crc32fast::Hasher::new();
        crc.update(&bad[start..start + 12 + len]);
        bad[start + 12 + len..start + 16 + len].copy_from_slice(&crc.finalize().to_le_bytes());
        bad
    }

    /// A PM-sample frame cut by the end of the file, or malformed, is a damaged frame whose
    /// samples are loss: the count its header gives (exact when the bytes are the producer's
    /// and agree with it), on its device when the recording describes it, else on the source;
    /// at least one when no count can be read. The warning counts PM samples, and the frames
    /// before it are metered.
    #[test]
    fn a_damaged_pm_frame_counts_its_samples_as_loss() {
        let mut b = Buf::new(API);
        kernel(&mut b, T0, 200, 1, 1, 0);
        let whole = gmr(1, &b, vec![frames(0)], false);
        // Cut inside the samples: the header's count of 2 stands.
        let torn = &whole[..whole.len() - 30];
        let (r, s) = meter_all(&[("torn.gmr", torn)], &[(1, "alice")]);
        assert_eq!(s[0].pm_samples, 0);
        assert_eq!(r.device_total(GPU, MeterKind::SmNs), 132_000);
        assert_eq!(r.lost(GPU, "torn_frame"), 2);
        assert!(r.loss.iter().all(|l| !l.lower_bound), "{:?}", r.loss);
        assert_warns(&r, "(type 9): torn last frame");
        assert_warns(&r, "a PM-samples frame: 2 PM samples lost as torn_frame");

        // Cut inside the header (5 of its 8 bytes): no count, at least one sample of no device.
        let torn = &whole[..whole.len() - (4 + 2 * 56 + 3)];
        let (r, _) = meter_all(&[("torn.gmr", torn)], &[(1, "alice")]);
        assert_eq!(r.lost(GPU, "torn_frame"), 0);
        assert_eq!(source_lost(&r, "torn_frame"), [(1, true)]);
        assert_warns(
            &r,
            "at least 1 PM samples (how many more is unknown) lost as torn_frame",
        );

        // The same frame with an unknown flag bit (checksum right): malformed, its 2 samples
        // lost exactly.
        let bad = malformed(&whole, 1, 8, 1 << 6);
        let (r, s) = meter_all(&[("bad.gmr", &bad)], &[(1, "alice")]);
        assert_eq!(s[0].pm_samples, 0);
        assert_eq!(r.lost(GPU, "corrupt_frame"), 2);
        assert!(r.loss.iter().all(|l| !l.lower_bound), "{:?}", r.loss);
        assert_warns(&r, "unknown flag bits 0x40");
        assert_warns(&r, "2 PM samples lost as corrupt_frame");

        // Of a device the recording does not describe: the source's loss.
        let other = gmr(1, &b, vec![frames(5)], false);
        let bad = malformed(&other, 1, 8, 1 << 6);
        let (r, _) = meter_all(&[("bad.gmr", &bad)], &[(1, "alice")]);
        assert_eq!(r.lost(GPU, "corrupt_frame"), 0);
        assert_eq!(source_lost(&r, "corrupt_frame"), [(2, false)]);

        // A checksum that does not match: the header's plausible count, a lower bound.
        let file = ok(read_gmr(&whole));
        let at = file.frames[1].offset as usize;
        let mut corrupt = whole.clone();
        corrupt[at + 12 + 20] ^= 0xff;
        let (r, _) = meter_all(&[("corrupt.gmr", &corrupt)], &[(1, "alice")]);
        assert_eq!(r.lost(GPU, "torn_frame") + r.lost(GPU, "corrupt_frame"), 2);
        assert!(r.loss.iter().any(|l| l.lower_bound), "{:?}", r.loss);
    }
}
