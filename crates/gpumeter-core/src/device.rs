//! GPU devices: identity, SM count and the per-SM limits the meters need.

use serde::{Deserialize, Serialize};

/// A compute capability, `major.minor` (e.g. 9.0 for H100), as CUDA's
/// `cudaDevAttrComputeCapabilityMajor/Minor` report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ComputeCapability {
    /// Major version (7 = Volta/Turing, 8 = Ampere/Ada, 9 = Hopper, 10/12 = Blackwell).
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

impl std::fmt::Display for ComputeCapability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl std::str::FromStr for ComputeCapability {
    type Err = String;
    /// Parses `"9.0"`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, b) = s
            .split_once('.')
            .ok_or_else(|| format!("compute capability `{s}`: expected MAJOR.MINOR, e.g. 9.0"))?;
        let major = a
            .parse()
            .map_err(|_| format!("compute capability `{s}`: `{a}` is not a number"))?;
        let minor = b
            .parse()
            .map_err(|_| format!("compute capability `{s}`: `{b}` is not a number"))?;
        Ok(ComputeCapability { major, minor })
    }
}

/// Per-SM and per-block limits of a device, each optional because sources differ in what they
/// give (Kineto `deviceProperties`, nsys `TARGET_INFO_GPU`, CUPTI DEVICE records). Used by the
/// occupancy calculator; unknown values are never guessed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmLimits {
    /// Maximum resident threads per SM (`maxThreadsPerMultiprocessor`).
    pub max_threads_per_sm: Option<u32>,
    /// Maximum resident blocks per SM (`maxBlocksPerSm`).
    pub max_blocks_per_sm: Option<u32>,
    /// Maximum resident warps per SM (`maxWarpsPerSm`).
    pub max_warps_per_sm: Option<u32>,
    /// 32-bit registers per SM (`regsPerMultiprocessor`).
    pub registers_per_sm: Option<u32>,
    /// 32-bit registers per block (`regsPerBlock`).
    pub registers_per_block: Option<u32>,
    /// Shared memory per SM, bytes (`sharedMemPerMultiprocessor`).
    pub shared_mem_per_sm_bytes: Option<u64>,
    /// Default shared memory per block, bytes (`sharedMemPerBlock`, 48 KiB on most GPUs).
    pub shared_mem_per_block_bytes: Option<u64>,
    /// Opt-in maximum shared memory per block, bytes (`sharedMemPerBlockOptin`).
    pub shared_mem_per_block_optin_bytes: Option<u64>,
    /// Threads per warp (`warpSize`, 32 on every NVIDIA GPU so far).
    pub warp_size: Option<u32>,
}

/// What a source, the device catalog or NVML knows about one GPU.
///
/// `key` is the device's identity across sources: `GPU-<uuid>` when the source gives
/// a UUID, else [`DeviceInfo::source_key`] of a label that identifies the source (the importers
/// use [`source_label`]: the first 16 hex digits of its content's SHA-256) and the device id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Identity across sources: the UUID (`GPU-…`) or `<source label>#<id>`.
    pub key: String,
    /// The device id within its source (CUDA device ordinal; Kineto `args.device`; nsys
    /// `deviceId`).
    pub id: u32,
    /// Marketing name, e.g. `NVIDIA H100 80GB HBM3`; `None` when the source does not say.
    pub name: Option<String>,
    /// Streaming multiprocessors on the device; `None` makes `sm_ns` not meterable.
    pub sm_count: Option<u32>,
    /// Compute capability.
    pub compute_capability: Option<ComputeCapability>,
    /// The device's UUID as the source printed it, if any.
    pub uuid: Option<String>,
    /// Per-SM limits.
    pub limits: SmLimits,
}

impl DeviceInfo {
    /// A device known only by its key and id: every other field unknown.
    pub fn bare(key: impl Into<String>, id: u32) -> Self {
        DeviceInfo {
            key: key.into(),
            id,
            name: None,
            sm_count: None,
            compute_capability: None,
            uuid: None,
            limits: SmLimits::default(),
        }
    }

    /// The key for a device without UUID: `<source label>#<device id>`. The label
    /// must identify the source by its content, not name it: two files called `trace.json` in
    /// two folders are two sources, and one trace gzipped, gunzipped or renamed is one
    /// (the importers pass [`source_label`] of the source's identity, e.g.
    /// `309220b5c1d2e3f4#0`).
    pub fn source_key(source_label: &str, id: u32) -> String {
        format!("{source_label}#{id}")
    }

    /// The key for a device with a UUID: `GPU-<uuid>` (or `MIG-<uuid>`), the prefix added when
    /// the source omits it. One UUID has one key in any spelling, so that one GPU is never
    /// two devices (billed twice, or escaping the refusal of a second device id with its
    /// UUID): the prefix is recognized in any case and written upper-case, the rest is written
    /// lower-case — the form `nvidia-smi -L`, NVML, CUPTI's DEVICE records and Nsight Systems'
    /// `TARGET_INFO_GPU` give, so the keys of real traces are as they print them. An old-style
    /// MIG name (`MIG-GPU-<uuid>/<gi>/<ci>`) keeps its inner `GPU-`.
    ///
    /// ```
    /// use gpumeter_core::device::DeviceInfo;
    /// let key = "GPU-74e128b2-90b6-b409-07c8-33bee5ff6f88";
    /// for spelling in [
    ///     key,
    ///     "74E128B2-90B6-B409-07C8-33BEE5FF6F88",
    ///     " gpu-74e128b2-90b6-b409-07c8-33bee5ff6f88 ",
    ///     "Gpu-74E128b2-90b6-b409-07c8-33bee5ff6f88",
    /// ] {
    ///     assert_eq!(DeviceInfo::uuid_key(spelling), key);
    /// }
    /// assert_eq!(DeviceInfo::uuid_key("mig-AB12-3"), "MIG-ab12-3");
    /// assert_eq!(DeviceInfo::uuid_key("MIG-gpu-AB12/1/0"), "MIG-GPU-ab12/1/0");
    /// ```
    pub fn uuid_key(uuid: &str) -> String {
        /// `s` without `prefix`, compared ignoring ASCII case.
        fn strip<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
            let head = s.get(..prefix.len())?;
            if head.eq_ignore_ascii_case(prefix) {
                s.get(prefix.len()..)
            } else {
                None
            }
        }
        let u = uuid.trim();
        if let Some(rest) = strip(u, "MIG-") {
            return match strip(rest, "GPU-") {
                Some(_) => format!("MIG-{}", DeviceInfo::uuid_key(rest)),
                None => format!("MIG-{}", rest.to_ascii_lowercase()),
            };
        }
        format!("GPU-{}", strip(u, "GPU-").unwrap_or(u).to_ascii_lowercase())
    }

    /// Fills every field this device does not know from `other`; known fields stay.
    pub fn fill_from(&mut self, other: &DeviceInfo) {
        fn fill<T: Clone>(a: &mut Option<T>, b: &Option<T>) {
            if a.is_none() {
                a.clone_from(b);
            }
        }
        fill(&mut self.name, &other.name);
        fill(&mut self.sm_count, &other.sm_count);
        fill(&mut self.compute_capability, &other.compute_capability);
        fill(&mut self.uuid, &other.uuid);
        let (l, o) = (&mut self.limits, &other.limits);
        fill(&mut l.max_threads_per_sm, &o.max_threads_per_sm);
        fill(&mut l.max_blocks_per_sm, &o.max_blocks_per_sm);
        fill(&mut l.max_warps_per_sm, &o.max_warps_per_sm);
        fill(&mut l.registers_per_sm, &o.registers_per_sm);
        fill(&mut l.registers_per_block, &o.registers_per_block);
        fill(&mut l.shared_mem_per_sm_bytes, &o.shared_mem_per_sm_bytes);
        fill(
            &mut l.shared_mem_per_block_bytes,
            &o.shared_mem_per_block_bytes,
        );
        fill(
            &mut l.shared_mem_per_block_optin_bytes,
            &o.shared_mem_per_block_optin_bytes,
        );
        fill(&mut l.warp_size, &o.warp_size);
    }
}

/// How many hex digits of a source's identity its label keeps ([`source_label`]): 16, i.e.
/// 64 bits, so two different sources of one biller share a label with a chance of about
/// n²/2⁶⁵ among n sources.
pub const SOURCE_LABEL_HEX: usize = 16;

/// The label of a source: the first [`SOURCE_LABEL_HEX`] hex digits of its
/// identity (`sources[].sha256`, lowercase hex: the SHA-256 of its content, so of a gzip
/// input's decompressed bytes). It prefixes the keys of the source's devices without a UUID
/// ([`DeviceInfo::source_key`], `<label>#<device id>`) and names the source where no device
/// can (a loss row with `device: null`). It never holds the file name: the same content
/// under another name, compressed or not, has the same label, hence the same device keys and
/// the same event ids.
///
/// ```
/// use gpumeter_core::device::source_label;
/// let sha = "309220b5c1d2e3f4".to_string() + &"0".repeat(48);
/// assert_eq!(source_label(&sha), "309220b5c1d2e3f4");
/// ```
pub fn source_label(identity_sha256: &str) -> String {
    identity_sha256
        .get(..SOURCE_LABEL_HEX)
        .unwrap_or(identity_sha256)
        .to_string()
}

/// The label of a `.gmr` recording: [`source_label`] of the SHA-256 of its header identity
/// (`<host>/<process id>/<CUPTI clock at start>/<wall clock at start>`), which stays the same
/// while the recording grows and when it is rewritten at exit, so the keys of its devices
/// without a UUID do too (a recording that grew is the same source).
pub fn recording_label(recording: &str) -> String {
    use sha2::Digest as _;
    source_label(&hex::encode(sha2::Sha256::digest(recording.as_bytes())))
}
