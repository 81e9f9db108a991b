//! Record layouts per producer CUPTI API version.
//!
//! Every offset and size here was taken with `offsetof`/`sizeof` from the CUPTI headers of the
//! three wheels gpumeter supports, compiled for x86-64 (CUPTI's `CUPTILP64` layout; aarch64 is
//! the same LP64, little-endian layout):
//!
//! * CUDA 12.8: `nvidia-cuda-cupti-cu12==12.8.90`, `CUPTI_API_VERSION` 26;
//! * CUDA 13.0: `nvidia-cuda-cupti==13.0.85` (13.0 Update 1, the CUPTI of driver r580 and
//!   PyTorch cu130), `CUPTI_API_VERSION` 130001;
//! * CUDA 13.4: `nvidia-cuda-cupti==13.4.92`, `CUPTI_API_VERSION` 130401.
//!
//! The struct CUPTI uses for each kind is the one its `CUpti_ActivityKind` documentation names
//! in that release (e.g. `CUpti_ActivityKernel9` for 12.8 kernels, `CUpti_ActivityKernel10` for
//! 13.0, `CUpti_ActivityKernel13` for 13.4), checked against libcupti's own walk
//! (`cuptiActivityGetNextRecord`): it steps every kind it accepts by exactly these sizes (12.8
//! and 13.0 in the test suite, which both walk without a GPU; 13.4 on an H200 with driver
//! r580), with one exception to the documentation in 12.8 and 13.0, JIT, noted below.
//! `tests/c/make_buffers.c` prints the same numbers from the headers and the test suite
//! compares them with these tables field by field ([`ApiVersion::layouts`]); buffers that
//! libcupti 12.8, 13.0 and 13.4 recorded on that H200 (`tests/c/live/`) decode to the values
//! libcupti's walk read through the header structs.
//!
//! A struct name does not pin a layout across releases: the 13.0 headers keep 12.8's
//! `CUpti_ActivityMemcpy6` and `CUpti_ActivityMemset4` (same sizes) but turn their
//! `uint32_t pad2` at byte 84 into `uint8_t isDeviceLaunched`, so 13.0 has its own tables for
//! them.
//!
//! CUPTI 13's opt-in *user-defined records* (`CUpti_ActivityFieldSelection`,
//! `CUPTI_ACTIVITY_ATTR_USER_DEFINED_RECORDS`) change record layouts at run time and are not
//! supported: a producer must use the default, full records.

use crate::decode::DecodeError;
use crate::kind::ActivityKind;

/// The CUPTI API version of the library that *produced* a buffer (`cuptiGetVersion()`, the
/// header's `CUPTI_API_VERSION`): it fixes the record layouts.
///
/// Only versions whose headers this crate was built from are accepted; any other value is
/// [`DecodeError::UnsupportedApiVersion`]. In particular the other 13.x values (130000, 130100
/// … 130400) are refused: 13.x releases added kernel, memcpy and device record versions
/// (`CUpti_ActivityKernel10` in 13.0 … `13` in 13.4), and without each release's header there
/// is no evidence of which one it emits. (13.0 GA, 130000, `nvidia-cuda-cupti` 13.0.48, declares
/// the same record structs as 130001 and its libcupti steps the same sizes; accepting it too is
/// a separate decision.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ApiVersion {
    /// CUDA 12.8, `CUPTI_API_VERSION` 26 (the default of raw buffer files).
    Cupti12_8,
    /// CUDA 13.0 with CUPTI update 1, `CUPTI_API_VERSION` 130001: the CUPTI of driver r580
    /// machines and PyTorch cu130 (`nvidia-cuda-cupti` 13.0.85).
    Cupti13_0,
    /// CUDA 13.4 with CUPTI update 1, `CUPTI_API_VERSION` 130401.
    Cupti13_4,
}

impl Default for ApiVersion {
    /// [`ApiVersion::Cupti12_8`] (26), the default of `--cupti-api-version`.
    fn default() -> Self {
        ApiVersion::Cupti12_8
    }
}

impl ApiVersion {
    /// Every supported version, oldest first.
    pub const ALL: [ApiVersion; 3] = [
        ApiVersion::Cupti12_8,
        ApiVersion::Cupti13_0,
        ApiVersion::Cupti13_4,
    ];

    /// The version for a producer's `CUPTI_API_VERSION` (`cuptiGetVersion()`).
    ///
    /// CUDA 13.0's first release (API 130000, `nvidia-cuda-cupti` 13.0.48) emits the same record
    /// structs as its Update 1 (130001): checked against both headers and libcupti's own record
    /// sizes, so both map to [`ApiVersion::Cupti13_0`].
    ///
    /// # Errors
    /// [`DecodeError::UnsupportedApiVersion`] for anything but 26, 130000, 130001 and 130401.
    pub fn from_cupti(version: u32) -> Result<Self, DecodeError> {
        match version {
            26 => Ok(ApiVersion::Cupti12_8),
            130_000 | 130_001 => Ok(ApiVersion::Cupti13_0),
            130_401 => Ok(ApiVersion::Cupti13_4),
            other => Err(DecodeError::UnsupportedApiVersion(other)),
        }
    }

    /// The `CUPTI_API_VERSION` number (26, 130001 or 130401).
    pub fn cupti_api_version(self) -> u32 {
        match self {
            ApiVersion::Cupti12_8 => 26,
            ApiVersion::Cupti13_0 => 130_001,
            ApiVersion::Cupti13_4 => 130_401,
        }
    }

    /// The CUDA toolkit release whose CUPTI produces these layouts (`12.8`, `13.0`, `13.4`).
    pub fn cuda_release(self) -> &'static str {
        match self {
            ApiVersion::Cupti12_8 => "12.8",
            ApiVersion::Cupti13_0 => "13.0",
            ApiVersion::Cupti13_4 => "13.4",
        }
    }

    pub(crate) fn tables(self) -> &'static Layouts {
        match self {
            ApiVersion::Cupti12_8 => &LAYOUTS_12_8,
            ApiVersion::Cupti13_0 => &LAYOUTS_13_0,
            ApiVersion::Cupti13_4 => &LAYOUTS_13_4,
        }
    }

    /// The size in bytes of a record of `kind` in this version, `None` when the kind does not
    /// exist in it (including [`ActivityKind::INVALID`]).
    pub fn record_size(self, kind: ActivityKind) -> Option<usize> {
        self.tables()
            .kinds
            .get(kind.0 as usize)
            .map(|&(size, _)| size)
            .filter(|&s| s > 0)
    }

    /// The header struct CUPTI uses for `kind` in this version (`CUpti_ActivityKernel9`),
    /// `None` when the kind does not exist in it.
    pub fn struct_name(self, kind: ActivityKind) -> Option<&'static str> {
        self.tables()
            .kinds
            .get(kind.0 as usize)
            .filter(|&&(s, _)| s > 0)
            .map(|&(_, name)| name)
    }

    /// The layout tables of this version, for cross-checks against the CUPTI headers: one
    /// entry per kind that exists in it, in kind order, with the offsets of the fields this
    /// crate decodes (empty for kinds it only skips).
    pub fn layouts(self) -> Vec<KindLayout> {
        let t = self.tables();
        let mut out = Vec::new();
        for (i, &(table_size, table_name)) in t.kinds.iter().enumerate() {
            if table_size == 0 {
                continue;
            }
            let kind = ActivityKind(i as u32);
            let family = match kind {
                ActivityKind::KERNEL | ActivityKind::CONCURRENT_KERNEL => t.kernel.describe(),
                ActivityKind::MEMCPY => t.memcpy.describe(),
                ActivityKind::MEMCPY2 => t.peer_copy.describe(),
                ActivityKind::MEMSET => t.memset.describe(),
                ActivityKind::MEMORY2 => t.memory.describe(),
                ActivityKind::DEVICE => t.device.describe(),
                ActivityKind::CONTEXT => t.context.describe(),
                ActivityKind::DRIVER
                | ActivityKind::RUNTIME
                | ActivityKind::INTERNAL_LAUNCH_API => t.api.describe(),
                ActivityKind::EXTERNAL_CORRELATION => t.external_correlation.describe(),
                ActivityKind::OVERHEAD => t.overhead.describe(),
                ActivityKind::GRAPH_TRACE => t.graph_trace.describe(),
                ActivityKind::INSTRUCTION_EXECUTION => t.instruction_execution.describe(),
                _ => (table_name, table_size, Vec::new()),
            };
            let (struct_name, size, fields) = family;
            out.push(KindLayout {
                kind,
                struct_name,
                size,
                fields,
            });
        }
        out
    }
}

impl std::fmt::Display for ApiVersion {
    /// `CUPTI 12.8 (API 26)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CUPTI {} (API {})",
            self.cuda_release(),
            self.cupti_api_version()
        )
    }
}

/// One decoded field of a record layout: its name in the CUPTI header struct, byte offset
/// from the record's start, and width in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldInfo {
    /// The member's name in the header struct (`gridX`; nested members dotted,
    /// `memoryPoolConfig.address`).
    pub name: &'static str,
    /// Byte offset from the start of the record.
    pub offset: usize,
    /// Width in bytes (`sizeof` the member).
    pub width: usize,
}

/// The layout of one activity kind in one API version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindLayout {
    /// The kind.
    pub kind: ActivityKind,
    /// The header struct CUPTI uses for it (`CUpti_ActivityKernel9`).
    pub struct_name: &'static str,
    /// Record size in bytes (`sizeof` the struct; a multiple of 8).
    pub size: usize,
    /// The fields this crate decodes, empty for kinds it only skips.
    pub fields: Vec<FieldInfo>,
}

impl KindLayout {
    /// A record of this kind, as CUPTI lays it out (`size` bytes, the kind in its first four):
    /// each `(name, value)` of `fields` written little-endian into the member `name`, cut to
    /// its width (a member wider than 8 bytes gets it in its first 8); every other byte zero.
    /// For synthetic buffers and tests.
    ///
    /// ```
    /// use gpumeter_cupti::{decode, ActivityKind, ApiVersion, Record};
    /// let api = ApiVersion::Cupti12_8;
    /// let layout = api.layouts().into_iter().find(|l| l.kind == ActivityKind::RUNTIME);
    /// let rec = layout.expect("RUNTIME").encode(&[("processId", 4242)])?;
    /// let d = decode(&rec, api).map_err(|e| e.to_string())?;
    /// assert!(matches!(&d.records[0].record, Record::Api(a) if a.process_id == 4242));
    /// # Ok::<(), String>(())
    /// ```
    ///
    /// # Errors
    /// A message naming the struct and a field it does not decode.
    pub fn encode(&self, fields: &[(&str, u64)]) -> Result<Vec<u8>, String> {
        let mut rec = vec![0u8; self.size];
        if let Some(head) = rec.get_mut(..4) {
            head.copy_from_slice(&self.kind.0.to_le_bytes());
        }
        for (name, value) in fields {
            let f = self
                .fields
                .iter()
                .find(|f| f.name == *name)
                .ok_or_else(|| format!("{} has no decoded field {name}", self.struct_name))?;
            // Members wider than 8 bytes (a UUID) get the value in their first 8.
            let width = f.width.min(8);
            if let Some(at) = rec.get_mut(f.offset..f.offset + width) {
                at.copy_from_slice(&value.to_le_bytes()[..width]);
            }
        }
        Ok(rec)
    }
}

/// Declares a layout type: the byte offset of every decoded field (`usize`; `Option<usize>`
/// for fields only some versions have), with the header member name and width in bytes.
macro_rules! layout {
    (
        $ty:ident { $($f:ident = $c:literal : $w:literal,)* }
        $(optional { $($of:ident = $oc:literal : $ow:literal,)* })?
    ) => {
        #[doc = concat!("Field offsets of one version of the `", stringify!($ty), "` family.")]
        #[derive(Debug, Clone, Copy)]
        pub(crate) struct $ty {
            pub(crate) struct_name: &'static str,
            pub(crate) size: usize,
            $(pub(crate) $f: usize,)*
            $($(pub(crate) $of: Option<usize>,)*)?
        }

        impl $ty {
            /// (struct name, size in bytes, decoded fields).
            pub(crate) fn describe(&self) -> (&'static str, usize, Vec<FieldInfo>) {
                (self.struct_name, self.size, self.fields())
            }

            pub(crate) fn fields(&self) -> Vec<FieldInfo> {
                #[allow(unused_mut)]
                let mut v = vec![$(FieldInfo { name: $c, offset: self.$f, width: $w },)*];
                $($(
                    if let Some(offset) = self.$of {
                        v.push(FieldInfo { name: $oc, offset, width: $ow });
                    }
                )*)?
                v
            }
        }
    };
}

/// Every layout of one API version.
#[derive(Debug)]
pub(crate) struct Layouts {
    /// (record size, struct name) per kind value; size 0 = no such kind.
    pub(crate) kinds: &'static [(usize, &'static str)],
    pub(crate) kernel: KernelLayout,
    pub(crate) memcpy: MemcpyLayout,
    pub(crate) peer_copy: PeerCopyLayout,
    pub(crate) memset: MemsetLayout,
    pub(crate) memory: MemoryLayout,
    pub(crate) device: DeviceLayout,
    pub(crate) context: ContextLayout,
    pub(crate) api: ApiLayout,
    pub(crate) external_correlation: ExternalCorrelationLayout,
    pub(crate) overhead: OverheadLayout,
    pub(crate) graph_trace: GraphTraceLayout,
    pub(crate) instruction_execution: InstructionExecutionLayout,
}

/// CUDA 12.8 (API 26).
static LAYOUTS_12_8: Layouts = Layouts {
    kinds: KINDS_12_8,
    kernel: KERNEL9,
    memcpy: MEMCPY6,
    peer_copy: MEMCPY_PTOP4,
    memset: MEMSET4,
    memory: MEMORY4,
    device: DEVICE5,
    context: CONTEXT3,
    api: API,
    external_correlation: EXTERNAL_CORRELATION,
    overhead: OVERHEAD3,
    graph_trace: GRAPH_TRACE2,
    instruction_execution: INSTRUCTION_EXECUTION,
};

/// CUDA 13.0 (API 130001).
static LAYOUTS_13_0: Layouts = Layouts {
    kinds: KINDS_13_0,
    kernel: KERNEL10,
    memcpy: MEMCPY6_13_0,
    peer_copy: MEMCPY_PTOP4,
    memset: MEMSET4_13_0,
    memory: MEMORY4,
    device: DEVICE5,
    context: CONTEXT3,
    api: API,
    external_correlation: EXTERNAL_CORRELATION,
    overhead: OVERHEAD3,
    graph_trace: GRAPH_TRACE2,
    instruction_execution: INSTRUCTION_EXECUTION,
};

/// CUDA 13.4 (API 130401).
static LAYOUTS_13_4: Layouts = Layouts {
    kinds: KINDS_13_4,
    kernel: KERNEL13,
    memcpy: MEMCPY7,
    peer_copy: MEMCPY_PTOP4,
    memset: MEMSET5,
    memory: MEMORY4,
    device: DEVICE6,
    context: CONTEXT4,
    api: API,
    external_correlation: EXTERNAL_CORRELATION,
    overhead: OVERHEAD3,
    graph_trace: GRAPH_TRACE2,
    instruction_execution: INSTRUCTION_EXECUTION,
};

/// Record size in bytes and struct of every kind of CUPTI 12.8 (API 26), indexed by kind value
/// (`sizeof` in the 12.8 wheel's `cupti_activity.h`, x86-64; index 0, INVALID, has none).
/// JIT (52) is `CUpti_ActivityJit2` (72 bytes) although the 12.8 enum comment names
/// `CUpti_ActivityJit` (64): libcupti 12.8's own `cuptiActivityGetNextRecord` steps 72 bytes.
const KINDS_12_8: &[(usize, &str)] = &[
    (0, ""),
    (96, "CUpti_ActivityMemcpy6"),
    (88, "CUpti_ActivityMemset4"),
    (208, "CUpti_ActivityKernel9"),
    (40, "CUpti_ActivityAPI"),
    (40, "CUpti_ActivityAPI"),
    (24, "CUpti_ActivityEvent"),
    (24, "CUpti_ActivityMetric"),
    (184, "CUpti_ActivityDevice5"),
    (32, "CUpti_ActivityContext3"),
    (208, "CUpti_ActivityKernel9"),
    (32, "CUpti_ActivityName"),
    (56, "CUpti_ActivityMarker2"),
    (32, "CUpti_ActivityMarkerData"),
    (24, "CUpti_ActivitySourceLocator"),
    (56, "CUpti_ActivityGlobalAccess3"),
    (40, "CUpti_ActivityBranch2"),
    (56, "CUpti_ActivityOverhead3"),
    (144, "CUpti_ActivityCdpKernel"),
    (40, "CUpti_ActivityPreemption"),
    (40, "CUpti_ActivityEnvironment"),
    (32, "CUpti_ActivityEventInstance"),
    (96, "CUpti_ActivityMemcpyPtoP4"),
    (32, "CUpti_ActivityMetricInstance"),
    (48, "CUpti_ActivityInstructionExecution"),
    (104, "CUpti_ActivityUnifiedMemoryCounter3"),
    (32, "CUpti_ActivityFunction"),
    (24, "CUpti_ActivityModule"),
    (24, "CUpti_ActivityDeviceAttribute"),
    (56, "CUpti_ActivitySharedAccess"),
    (40, "CUpti_ActivityPCSampling3"),
    (32, "CUpti_ActivityPCSamplingRecordInfo"),
    (24, "CUpti_ActivityInstructionCorrelation"),
    (152, "CUpti_ActivityOpenAccData"),
    (152, "CUpti_ActivityOpenAccLaunch"),
    (120, "CUpti_ActivityOpenAccOther"),
    (56, "CUpti_ActivityCudaEvent2"),
    (24, "CUpti_ActivityStream"),
    (56, "CUpti_ActivitySynchronization2"),
    (24, "CUpti_ActivityExternalCorrelation"),
    (136, "CUpti_ActivityNvLink4"),
    (32, "CUpti_ActivityInstantaneousEvent"),
    (32, "CUpti_ActivityInstantaneousEventInstance"),
    (32, "CUpti_ActivityInstantaneousMetric"),
    (32, "CUpti_ActivityInstantaneousMetricInstance"),
    (80, "CUpti_ActivityMemory"),
    (168, "CUpti_ActivityPcie"),
    (40, "CUpti_ActivityOpenMp"),
    (40, "CUpti_ActivityAPI"),
    (128, "CUpti_ActivityMemory4"),
    (72, "CUpti_ActivityMemoryPool2"),
    (56, "CUpti_ActivityGraphTrace2"),
    (72, "CUpti_ActivityJit2"),
    (56, "CUpti_ActivityDeviceGraphTrace"),
    (64, "CUpti_ActivityMemDecompress"),
];

/// Record size in bytes and struct of every kind of CUPTI 13.0 (API 130001), indexed by kind
/// value (`sizeof` in the 13.0.85 wheel's `cupti_activity.h`, x86-64; the enum ends at
/// CONFIDENTIAL_COMPUTE_ROTATION, 55).
///
/// * JIT (52) is `CUpti_ActivityJit2` (72 bytes) although the 13.0 enum comment names
///   `CUpti_ActivityJit` (64), as in 12.8: libcupti 13.0's `cuptiActivityGetNextRecord` steps
///   72 bytes.
/// * The 13.0 headers declare the legacy event, metric, source-level and PC-sampling kinds (6, 7,
///   14, 15, 16, 21, 23, 24, 29–32, 41–44) "unsupported" from 13.0 on: libcupti 13.0 refuses to
///   enable them and its own walk stops at them with `CUPTI_ERROR_INVALID_KIND`, so a 13.0
///   producer never emits them. They keep their header sizes here (the enum still defines
///   them), so the decoder steps over them as it does for 12.8 and 13.4.
/// * libcupti 13.0 steps every other kind by exactly these sizes (checked with its own walk).
const KINDS_13_0: &[(usize, &str)] = &[
    (0, ""),
    (96, "CUpti_ActivityMemcpy6"),
    (88, "CUpti_ActivityMemset4"),
    (216, "CUpti_ActivityKernel10"),
    (40, "CUpti_ActivityAPI"),
    (40, "CUpti_ActivityAPI"),
    (24, "CUpti_ActivityEvent"),
    (24, "CUpti_ActivityMetric"),
    (184, "CUpti_ActivityDevice5"),
    (32, "CUpti_ActivityContext3"),
    (216, "CUpti_ActivityKernel10"),
    (32, "CUpti_ActivityName"),
    (56, "CUpti_ActivityMarker2"),
    (40, "CUpti_ActivityMarkerData2"),
    (24, "CUpti_ActivitySourceLocator"),
    (56, "CUpti_ActivityGlobalAccess3"),
    (40, "CUpti_ActivityBranch2"),
    (56, "CUpti_ActivityOverhead3"),
    (144, "CUpti_ActivityCdpKernel"),
    (40, "CUpti_ActivityPreemption"),
    (40, "CUpti_ActivityEnvironment"),
    (32, "CUpti_ActivityEventInstance"),
    (96, "CUpti_ActivityMemcpyPtoP4"),
    (32, "CUpti_ActivityMetricInstance"),
    (48, "CUpti_ActivityInstructionExecution"),
    (104, "CUpti_ActivityUnifiedMemoryCounter3"),
    (32, "CUpti_ActivityFunction"),
    (24, "CUpti_ActivityModule"),
    (24, "CUpti_ActivityDeviceAttribute"),
    (56, "CUpti_ActivitySharedAccess"),
    (40, "CUpti_ActivityPCSampling3"),
    (32, "CUpti_ActivityPCSamplingRecordInfo"),
    (24, "CUpti_ActivityInstructionCorrelation"),
    (152, "CUpti_ActivityOpenAccData"),
    (152, "CUpti_ActivityOpenAccLaunch"),
    (120, "CUpti_ActivityOpenAccOther"),
    (56, "CUpti_ActivityCudaEvent2"),
    (24, "CUpti_ActivityStream"),
    (56, "CUpti_ActivitySynchronization2"),
    (24, "CUpti_ActivityExternalCorrelation"),
    (136, "CUpti_ActivityNvLink4"),
    (32, "CUpti_ActivityInstantaneousEvent"),
    (32, "CUpti_ActivityInstantaneousEventInstance"),
    (32, "CUpti_ActivityInstantaneousMetric"),
    (32, "CUpti_ActivityInstantaneousMetricInstance"),
    (80, "CUpti_ActivityMemory"),
    (168, "CUpti_ActivityPcie"),
    (40, "CUpti_ActivityOpenMp"),
    (40, "CUpti_ActivityAPI"),
    (128, "CUpti_ActivityMemory4"),
    (80, "CUpti_ActivityMemoryPool3"),
    (56, "CUpti_ActivityGraphTrace2"),
    (72, "CUpti_ActivityJit2"),
    (56, "CUpti_ActivityDeviceGraphTrace"),
    (64, "CUpti_ActivityMemDecompress"),
    (32, "CUpti_ActivityConfidentialComputeRotation"),
];

/// Record size in bytes and struct of every kind of CUPTI 13.4 (API 130401), indexed by kind
/// value (`sizeof` in the 13.4.92 wheel's `cupti_activity.h`, x86-64). libcupti 13.4 steps every
/// kind by these sizes except the legacy kinds it refuses, the same as 13.0's (seen on an H200
/// with driver r580; it does not walk without a driver).
const KINDS_13_4: &[(usize, &str)] = &[
    (0, ""),
    (112, "CUpti_ActivityMemcpy7"),
    (104, "CUpti_ActivityMemset5"),
    (248, "CUpti_ActivityKernel13"),
    (40, "CUpti_ActivityAPI"),
    (40, "CUpti_ActivityAPI"),
    (24, "CUpti_ActivityEvent"),
    (24, "CUpti_ActivityMetric"),
    (192, "CUpti_ActivityDevice6"),
    (40, "CUpti_ActivityContext4"),
    (248, "CUpti_ActivityKernel13"),
    (32, "CUpti_ActivityName"),
    (56, "CUpti_ActivityMarker2"),
    (40, "CUpti_ActivityMarkerData2"),
    (24, "CUpti_ActivitySourceLocator"),
    (56, "CUpti_ActivityGlobalAccess3"),
    (40, "CUpti_ActivityBranch2"),
    (56, "CUpti_ActivityOverhead3"),
    (144, "CUpti_ActivityCdpKernel"),
    (40, "CUpti_ActivityPreemption"),
    (40, "CUpti_ActivityEnvironment"),
    (32, "CUpti_ActivityEventInstance"),
    (96, "CUpti_ActivityMemcpyPtoP4"),
    (32, "CUpti_ActivityMetricInstance"),
    (48, "CUpti_ActivityInstructionExecution"),
    (104, "CUpti_ActivityUnifiedMemoryCounter3"),
    (32, "CUpti_ActivityFunction"),
    (24, "CUpti_ActivityModule"),
    (24, "CUpti_ActivityDeviceAttribute"),
    (56, "CUpti_ActivitySharedAccess"),
    (40, "CUpti_ActivityPCSampling3"),
    (32, "CUpti_ActivityPCSamplingRecordInfo"),
    (24, "CUpti_ActivityInstructionCorrelation"),
    (152, "CUpti_ActivityOpenAccData"),
    (152, "CUpti_ActivityOpenAccLaunch"),
    (120, "CUpti_ActivityOpenAccOther"),
    (56, "CUpti_ActivityCudaEvent2"),
    (24, "CUpti_ActivityStream"),
    (56, "CUpti_ActivitySynchronization2"),
    (24, "CUpti_ActivityExternalCorrelation"),
    (88, "CUpti_ActivityNvLink5"),
    (32, "CUpti_ActivityInstantaneousEvent"),
    (32, "CUpti_ActivityInstantaneousEventInstance"),
    (32, "CUpti_ActivityInstantaneousMetric"),
    (32, "CUpti_ActivityInstantaneousMetricInstance"),
    (80, "CUpti_ActivityMemory"),
    (168, "CUpti_ActivityPcie"),
    (40, "CUpti_ActivityOpenMp"),
    (40, "CUpti_ActivityAPI"),
    (128, "CUpti_ActivityMemory4"),
    (80, "CUpti_ActivityMemoryPool3"),
    (56, "CUpti_ActivityGraphTrace2"),
    (72, "CUpti_ActivityJit2"),
    (56, "CUpti_ActivityDeviceGraphTrace"),
    (64, "CUpti_ActivityMemDecompress"),
    (32, "CUpti_ActivityConfidentialComputeRotation"),
    (56, "CUpti_ActivityGraphHostNode"),
    (24, "CUpti_ActivityComputeEngineCtxSwitch"),
    (48, "CUpti_ActivityHostLaunch"),
    (304, "CUpti_ActivityGreenContext3"),
];

layout! {
    KernelLayout {
        kind = "kind": 4,
        registers_per_thread = "registersPerThread": 2,
        start = "start": 8,
        end = "end": 8,
        completed = "completed": 8,
        device_id = "deviceId": 4,
        context_id = "contextId": 4,
        stream_id = "streamId": 4,
        grid_x = "gridX": 4,
        grid_y = "gridY": 4,
        grid_z = "gridZ": 4,
        block_x = "blockX": 4,
        block_y = "blockY": 4,
        block_z = "blockZ": 4,
        static_shared_memory = "staticSharedMemory": 4,
        dynamic_shared_memory = "dynamicSharedMemory": 4,
        local_memory_per_thread = "localMemoryPerThread": 4,
        correlation_id = "correlationId": 4,
        grid_id = "gridId": 8,
        name_ptr = "name": 8,
        queued = "queued": 8,
        submitted = "submitted": 8,
        launch_type = "launchType": 1,
        shared_memory_executed = "sharedMemoryExecuted": 4,
        graph_node_id = "graphNodeId": 8,
        graph_id = "graphId": 4,
        cluster_x = "clusterX": 4,
        cluster_y = "clusterY": 4,
        cluster_z = "clusterZ": 4,
    }
    optional {
        is_device_launched = "isDeviceLaunched": 1,
    }
}

/// `CUpti_ActivityKernel9` (`cupti_activity.h` of CUDA 12.8): 208 bytes.
pub(crate) const KERNEL9: KernelLayout = KernelLayout {
    struct_name: "CUpti_ActivityKernel9",
    size: 208,
    kind: 0,
    registers_per_thread: 6,
    start: 16,
    end: 24,
    completed: 32,
    device_id: 40,
    context_id: 44,
    stream_id: 48,
    grid_x: 52,
    grid_y: 56,
    grid_z: 60,
    block_x: 64,
    block_y: 68,
    block_z: 72,
    static_shared_memory: 76,
    dynamic_shared_memory: 80,
    local_memory_per_thread: 84,
    correlation_id: 92,
    grid_id: 96,
    name_ptr: 104,
    queued: 120,
    submitted: 128,
    launch_type: 136,
    shared_memory_executed: 140,
    graph_node_id: 144,
    graph_id: 156,
    cluster_x: 176,
    cluster_y: 180,
    cluster_z: 184,
    is_device_launched: None,
};

/// `CUpti_ActivityKernel10` (`cupti_activity.h` of CUDA 13.0): 216 bytes; Kernel9's layout
/// plus `isDeviceLaunched`.
pub(crate) const KERNEL10: KernelLayout = KernelLayout {
    struct_name: "CUpti_ActivityKernel10",
    size: 216,
    kind: 0,
    registers_per_thread: 6,
    start: 16,
    end: 24,
    completed: 32,
    device_id: 40,
    context_id: 44,
    stream_id: 48,
    grid_x: 52,
    grid_y: 56,
    grid_z: 60,
    block_x: 64,
    block_y: 68,
    block_z: 72,
    static_shared_memory: 76,
    dynamic_shared_memory: 80,
    local_memory_per_thread: 84,
    correlation_id: 92,
    grid_id: 96,
    name_ptr: 104,
    queued: 120,
    submitted: 128,
    launch_type: 136,
    shared_memory_executed: 140,
    graph_node_id: 144,
    graph_id: 156,
    cluster_x: 176,
    cluster_y: 180,
    cluster_z: 184,
    is_device_launched: Some(208),
};

/// `CUpti_ActivityKernel13` (`cupti_activity.h` of CUDA 13.4): 248 bytes.
pub(crate) const KERNEL13: KernelLayout = KernelLayout {
    struct_name: "CUpti_ActivityKernel13",
    size: 248,
    kind: 0,
    registers_per_thread: 6,
    start: 16,
    end: 24,
    completed: 32,
    device_id: 40,
    context_id: 44,
    stream_id: 48,
    grid_x: 52,
    grid_y: 56,
    grid_z: 60,
    block_x: 64,
    block_y: 68,
    block_z: 72,
    static_shared_memory: 76,
    dynamic_shared_memory: 80,
    local_memory_per_thread: 84,
    correlation_id: 92,
    grid_id: 96,
    name_ptr: 104,
    queued: 120,
    submitted: 128,
    launch_type: 136,
    shared_memory_executed: 140,
    graph_node_id: 144,
    graph_id: 156,
    cluster_x: 176,
    cluster_y: 180,
    cluster_z: 184,
    is_device_launched: Some(208),
};

layout! {
    MemcpyLayout {
        kind = "kind": 4,
        copy_kind = "copyKind": 1,
        src_kind = "srcKind": 1,
        dst_kind = "dstKind": 1,
        flags = "flags": 1,
        bytes = "bytes": 8,
        start = "start": 8,
        end = "end": 8,
        device_id = "deviceId": 4,
        context_id = "contextId": 4,
        stream_id = "streamId": 4,
        correlation_id = "correlationId": 4,
        runtime_correlation_id = "runtimeCorrelationId": 4,
        graph_node_id = "graphNodeId": 8,
        graph_id = "graphId": 4,
        copy_count = "copyCount": 8,
    }
    optional {
        is_device_launched = "isDeviceLaunched": 1,
    }
}

/// `CUpti_ActivityMemcpy6` (`cupti_activity.h` of CUDA 12.8): 96 bytes (13.0: `MEMCPY6_13_0`).
pub(crate) const MEMCPY6: MemcpyLayout = MemcpyLayout {
    struct_name: "CUpti_ActivityMemcpy6",
    size: 96,
    kind: 0,
    copy_kind: 4,
    src_kind: 5,
    dst_kind: 6,
    flags: 7,
    bytes: 8,
    start: 16,
    end: 24,
    device_id: 32,
    context_id: 36,
    stream_id: 40,
    correlation_id: 44,
    runtime_correlation_id: 48,
    graph_node_id: 64,
    graph_id: 72,
    copy_count: 88,
    is_device_launched: None,
};

/// `CUpti_ActivityMemcpy6` as the CUDA 13.0 headers declare it: 96 bytes, 12.8's layout with
/// `isDeviceLaunched` in place of 12.8's `pad2` (byte 84).
pub(crate) const MEMCPY6_13_0: MemcpyLayout = MemcpyLayout {
    struct_name: "CUpti_ActivityMemcpy6",
    size: 96,
    kind: 0,
    copy_kind: 4,
    src_kind: 5,
    dst_kind: 6,
    flags: 7,
    bytes: 8,
    start: 16,
    end: 24,
    device_id: 32,
    context_id: 36,
    stream_id: 40,
    correlation_id: 44,
    runtime_correlation_id: 48,
    graph_node_id: 64,
    graph_id: 72,
    copy_count: 88,
    is_device_launched: Some(84),
};

/// `CUpti_ActivityMemcpy7` (`cupti_activity.h` of CUDA 13.4): 112 bytes.
pub(crate) const MEMCPY7: MemcpyLayout = MemcpyLayout {
    struct_name: "CUpti_ActivityMemcpy7",
    size: 112,
    kind: 0,
    copy_kind: 4,
    src_kind: 5,
    dst_kind: 6,
    flags: 7,
    bytes: 8,
    start: 16,
    end: 24,
    device_id: 32,
    context_id: 36,
    stream_id: 40,
    correlation_id: 44,
    runtime_correlation_id: 48,
    graph_node_id: 64,
    graph_id: 72,
    copy_count: 88,
    is_device_launched: Some(84),
};

layout! {
    PeerCopyLayout {
        kind = "kind": 4,
        copy_kind = "copyKind": 1,
        src_kind = "srcKind": 1,
        dst_kind = "dstKind": 1,
        flags = "flags": 1,
        bytes = "bytes": 8,
        start = "start": 8,
        end = "end": 8,
        device_id = "deviceId": 4,
        context_id = "contextId": 4,
        stream_id = "streamId": 4,
        src_device_id = "srcDeviceId": 4,
        src_context_id = "srcContextId": 4,
        dst_device_id = "dstDeviceId": 4,
        dst_context_id = "dstContextId": 4,
        correlation_id = "correlationId": 4,
        graph_node_id = "graphNodeId": 8,
        graph_id = "graphId": 4,
    }
}

/// `CUpti_ActivityMemcpyPtoP4` (`cupti_activity.h` of CUDA 12.8, 13.0 and 13.4): 96 bytes.
pub(crate) const MEMCPY_PTOP4: PeerCopyLayout = PeerCopyLayout {
    struct_name: "CUpti_ActivityMemcpyPtoP4",
    size: 96,
    kind: 0,
    copy_kind: 4,
    src_kind: 5,
    dst_kind: 6,
    flags: 7,
    bytes: 8,
    start: 16,
    end: 24,
    device_id: 32,
    context_id: 36,
    stream_id: 40,
    src_device_id: 44,
    src_context_id: 48,
    dst_device_id: 52,
    dst_context_id: 56,
    correlation_id: 60,
    graph_node_id: 72,
    graph_id: 80,
};

layout! {
    MemsetLayout {
        kind = "kind": 4,
        value = "value": 4,
        bytes = "bytes": 8,
        start = "start": 8,
        end = "end": 8,
        device_id = "deviceId": 4,
        context_id = "contextId": 4,
        stream_id = "streamId": 4,
        correlation_id = "correlationId": 4,
        flags = "flags": 2,
        memory_kind = "memoryKind": 2,
        graph_node_id = "graphNodeId": 8,
        graph_id = "graphId": 4,
    }
    optional {
        is_device_launched = "isDeviceLaunched": 1,
    }
}

/// `CUpti_ActivityMemset4` (`cupti_activity.h` of CUDA 12.8): 88 bytes (13.0: `MEMSET4_13_0`).
pub(crate) const MEMSET4: MemsetLayout = MemsetLayout {
    struct_name: "CUpti_ActivityMemset4",
    size: 88,
    kind: 0,
    value: 4,
    bytes: 8,
    start: 16,
    end: 24,
    device_id: 32,
    context_id: 36,
    stream_id: 40,
    correlation_id: 44,
    flags: 48,
    memory_kind: 50,
    graph_node_id: 64,
    graph_id: 72,
    is_device_launched: None,
};

/// `CUpti_ActivityMemset4` as the CUDA 13.0 headers declare it: 88 bytes, 12.8's layout with
/// `isDeviceLaunched` in place of 12.8's `pad2` (byte 84).
pub(crate) const MEMSET4_13_0: MemsetLayout = MemsetLayout {
    struct_name: "CUpti_ActivityMemset4",
    size: 88,
    kind: 0,
    value: 4,
    bytes: 8,
    start: 16,
    end: 24,
    device_id: 32,
    context_id: 36,
    stream_id: 40,
    correlation_id: 44,
    flags: 48,
    memory_kind: 50,
    graph_node_id: 64,
    graph_id: 72,
    is_device_launched: Some(84),
};

/// `CUpti_ActivityMemset5` (`cupti_activity.h` of CUDA 13.4): 104 bytes.
pub(crate) const MEMSET5: MemsetLayout = MemsetLayout {
    struct_name: "CUpti_ActivityMemset5",
    size: 104,
    kind: 0,
    value: 4,
    bytes: 8,
    start: 16,
    end: 24,
    device_id: 32,
    context_id: 36,
    stream_id: 40,
    correlation_id: 44,
    flags: 48,
    memory_kind: 50,
    graph_node_id: 64,
    graph_id: 72,
    is_device_launched: Some(84),
};

layout! {
    MemoryLayout {
        kind = "kind": 4,
        memory_operation_type = "memoryOperationType": 4,
        memory_kind = "memoryKind": 4,
        correlation_id = "correlationId": 4,
        address = "address": 8,
        bytes = "bytes": 8,
        timestamp = "timestamp": 8,
        pc = "PC": 8,
        process_id = "processId": 4,
        device_id = "deviceId": 4,
        context_id = "contextId": 4,
        stream_id = "streamId": 4,
        name_ptr = "name": 8,
        is_async = "isAsync": 4,
        pool_type = "memoryPoolConfig.memoryPoolType": 4,
        pool_address = "memoryPoolConfig.address": 8,
        pool_release_threshold = "memoryPoolConfig.releaseThreshold": 8,
        pool_size = "memoryPoolConfig.pool.size": 8,
        pool_utilized_size = "memoryPoolConfig.utilizedSize": 8,
        source_ptr = "source": 8,
    }
}

/// `CUpti_ActivityMemory4` (`cupti_activity.h` of CUDA 12.8, 13.0 and 13.4): 128 bytes.
pub(crate) const MEMORY4: MemoryLayout = MemoryLayout {
    struct_name: "CUpti_ActivityMemory4",
    size: 128,
    kind: 0,
    memory_operation_type: 4,
    memory_kind: 8,
    correlation_id: 12,
    address: 16,
    bytes: 24,
    timestamp: 32,
    pc: 40,
    process_id: 48,
    device_id: 52,
    context_id: 56,
    stream_id: 60,
    name_ptr: 64,
    is_async: 72,
    pool_type: 80,
    pool_address: 88,
    pool_release_threshold: 96,
    pool_size: 104,
    pool_utilized_size: 112,
    source_ptr: 120,
};

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

#[cfg(test)]
mod tests {
    use super::*;

    /// The typed layouts agree with the per-kind size and struct tables.
    #[test]
    fn families_match_kind_tables() {
        for api in ApiVersion::ALL {
            for kl in api.layouts() {
                assert_eq!(api.record_size(kl.kind), Some(kl.size), "{api} {}", kl.kind);
                assert_eq!(
                    api.struct_name(kl.kind),
                    Some(kl.struct_name),
                    "{api} {}",
                    kl.kind
                );
            }
        }
        assert_eq!(ApiVersion::Cupti12_8.layouts().len(), 54);
        assert_eq!(ApiVersion::Cupti13_0.layouts().len(), 55);
        assert_eq!(ApiVersion::Cupti13_4.layouts().len(), 59);
    }
}
