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

use crate::kind::ActivityKind;

use self::joined::*;
use self::versions::{LAYOUTS_12_8, LAYOUTS_13_0, LAYOUTS_13_4};
pub(crate) use self::work::KernelLayout;
use self::work::*;

/// The CUPTI API version of the library that *produced* a buffer (`cuptiGetVersion()`, the
/// header's `CUPTI_API_VERSION`): it fixes the record layouts.
///
/// Only versions whose headers this crate was built from are accepted; any other value is
/// [`DecodeError::UnsupportedApiVersion`](crate::DecodeError::UnsupportedApiVersion). In particular the other 13.x values (130000, 130100
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

// The tables, declared after the `layout!` macro they use.
mod joined;
mod versions;
mod work;

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
