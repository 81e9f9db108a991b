//! # gpumeter-synth
//!
//! Synthetic CUPTI 12.8 (API 26) activity buffers and `.gmr` recordings for gpumeter's
//! benchmarks (issue 13, docs/PERFORMANCE.md, "Targets"): the input of `benches/pipeline.rs`,
//! `crates/gpumeter-ffi/benches/ingest.rs` and `scripts/bench-peers.sh`.
//!
//! A [`SynthConfig`] describes a workload of N kernel launches; the [`Generator`] turns it into
//! records, one launch at a time:
//!
//! * one DEVICE record (`CUpti_ActivityDevice5`) per device first: an H100 SXM (132 SMs, compute
//!   capability 9.0, 64 warps, 32 blocks, 65 536 registers and 228 KiB of shared memory per SM),
//!   so that `sm_ns` and `warp_ns` are meterable (occupancy from the launch configuration);
//! * per launch, in this order: an EXTERNAL_CORRELATION record (`CUSTOM0`, external id = the
//!   launch's tenant, [`TENANT_EXTERNAL_ID_BASE`] + tenant), a RUNTIME record
//!   (`cudaLaunchKernel`, the tenant's process id, [`PROCESS_ID_BASE`] + tenant mod processes)
//!   and the CONCURRENT_KERNEL record (`CUpti_ActivityKernel9`), joined by one correlation id.
//!   Each of the first two can be switched off ([`SynthConfig::external_correlation`],
//!   [`SynthConfig::api_records`]);
//! * launches arrive at [`SynthConfig::kernels_per_second`] on average (uniform gaps), each on
//!   a random device, stream and tenant. A kernel starts 5 µs after its launch or when the
//!   previous kernel of its stream ends, whichever is later, so kernels of the streams of a
//!   device overlap (concurrency) and each stream is serial, as in CUDA. One kernel in 500 is
//!   large (2–20 ms, big grids), the others small (5–150 µs); launch configurations come from
//!   a fixed table of 16 (grid, block, registers, shared memory), names from 12 kernel names.
//!
//! Everything is a function of the configuration and its [`SynthConfig::seed`] (ChaCha8): the
//! same configuration gives the same bytes on every machine. Files are written in a streaming
//! way ([`write_raw`], [`write_gmr`]): memory is one buffer of
//! [`SynthConfig::kernels_per_buffer`] launches, whatever N.
//!
//! ```
//! use gpumeter_synth::{buffer, SynthConfig};
//! let cfg = SynthConfig { kernels: 1_000, ..SynthConfig::default() };
//! let bytes = buffer(&cfg)?;
//! assert_eq!(bytes.len() as u64, cfg.bytes());
//! # Ok::<(), gpumeter_synth::SynthError>(())
//! ```
//!
//! Where this crate sits in the flow from sources to the bank, what it owns and what it may
//! depend on: `docs/ARCHITECTURE.md` in the repository.

use std::io::Write;

use gpumeter_cupti::{format_uuid, ActivityKind, ApiVersion};
use gpumeter_recording::gmr::{
    ClockPair, GmrDevice, GmrError, GmrHeader, GmrWriter, Producer, StringTable,
};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// The API version every generated buffer is laid out in (CUDA 12.8, `CUPTI_API_VERSION` 26).
pub const API: ApiVersion = ApiVersion::Cupti12_8;

/// External id of tenant `t` is `TENANT_EXTERNAL_ID_BASE + t` (EXTERNAL_CORRELATION, CUSTOM0).
pub const TENANT_EXTERNAL_ID_BASE: u64 = 1_000;

/// Process id of process `p` is `PROCESS_ID_BASE + p` (RUNTIME records, `.gmr` header).
pub const PROCESS_ID_BASE: u32 = 40_000;

/// `CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0`.
const EXTERNAL_KIND_CUSTOM0: u32 = 3;

/// `CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000`.
const CBID_CUDA_LAUNCH_KERNEL: u32 = 211;

/// Streams of a device get ids `FIRST_STREAM_ID ..` (CUPTI numbers streams from small ids up).
const FIRST_STREAM_ID: u32 = 7;

/// Fake pointer values of the kernel names (resolved by a `.gmr`'s string table).
const NAME_PTR_BASE: u64 = 0x7f3a_0000_1000;

/// Fake pointer values of the device names.
const DEVICE_NAME_PTR_BASE: u64 = 0x7f3a_0010_0000;

/// The device every generated DEVICE record describes.
const DEVICE_NAME: &str = "NVIDIA H100 80GB HBM3";

/// Kernel names (the first ones small elementwise kernels, the last ones GEMMs).
const KERNEL_NAMES: [&str; 12] = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps>>",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>",
    "void at::native::index_elementwise_kernel<128, 4>",
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
    "flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>",
    "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize256x128x64_warpgroupsize2x1x1",
    "cutlass::Kernel2<cutlass_80_tensorop_s16816gemm_relu_f16_256x128_32x3_nn_align8>",
];

/// A launch configuration: grid, block, registers per thread, static and dynamic shared
/// memory (bytes).
#[derive(Debug, Clone, Copy)]
struct LaunchConfig {
    grid: [i32; 3],
    block: [i32; 3],
    registers: u16,
    static_smem: i32,
    dynamic_smem: i32,
}

const fn lc(grid: [i32; 3], block: [i32; 3], registers: u16, s: i32, d: i32) -> LaunchConfig {
    LaunchConfig {
        grid,
        block,
        registers,
        static_smem: s,
        dynamic_smem: d,
    }
}

/// Configurations of small kernels (less than a wave up to a few waves of an H100).
const SMALL: [LaunchConfig; 12] = [
    lc([1, 1, 1], [32, 1, 1], 16, 0, 0),
    lc([8, 1, 1], [128, 1, 1], 24, 0, 0),
    lc([66, 1, 1], [256, 1, 1], 32, 0, 0),
    lc([132, 1, 1], [512, 1, 1], 40, 0, 0),
    lc([264, 1, 1], [128, 1, 1], 28, 1_024, 0),
    lc([528, 1, 1], [256, 1, 1], 32, 0, 0),
    lc([1_024, 1, 1], [128, 1, 1], 64, 4_096, 0),
    lc([64, 4, 1], [32, 8, 1], 56, 8_192, 0),
    lc([48, 1, 1], [1_024, 1, 1], 32, 0, 16_384),
    lc([2_048, 1, 1], [256, 1, 1], 18, 0, 0),
    lc([16, 16, 1], [16, 16, 1], 48, 2_048, 0),
    lc([300, 1, 1], [64, 1, 1], 96, 0, 0),
];

/// Configurations of large kernels (GEMMs, attention: many waves, heavy on registers).
const LARGE: [LaunchConfig; 4] = [
    lc([132, 1, 1], [384, 1, 1], 168, 0, 232_448),
    lc([8_192, 1, 1], [256, 1, 1], 128, 49_152, 0),
    lc([64, 32, 4], [128, 1, 1], 255, 0, 114_688),
    lc([4_096, 2, 1], [512, 1, 1], 64, 16_384, 65_536),
];

/// A workload to generate. `Default` is 1 M launches on 2 devices × 4 streams by 8 tenants in
/// 4 processes at 10 000 launches/s (100 s of record time), every launch with its
/// EXTERNAL_CORRELATION and RUNTIME records, seed 13.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SynthConfig {
    /// Kernel launches (CONCURRENT_KERNEL records).
    pub kernels: u64,
    /// Devices (ids `0..devices`), each with a DEVICE record. At least 1.
    pub devices: u32,
    /// Streams per device. At least 1.
    pub streams: u32,
    /// Tenants: distinct external ids. At least 1.
    pub tenants: u32,
    /// Processes: distinct process ids (tenant `t` runs in process `t mod processes`). At least 1.
    pub processes: u32,
    /// Mean launch rate over all devices, launches per second of record time. At least 1.
    pub kernels_per_second: u64,
    /// Seed of the pseudo-random choices.
    pub seed: u64,
    /// CUPTI timestamp of the first launch, ns.
    pub start_ns: u64,
    /// Launches per activity buffer (`.gmr` frames; [`buffers`]). At least 1.
    pub kernels_per_buffer: u64,
    /// Emit an EXTERNAL_CORRELATION record before each kernel (the tenant's external id).
    pub external_correlation: bool,
    /// Emit a RUNTIME record before each kernel (the tenant's process id).
    pub api_records: bool,
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            kernels: 1_000_000,
            devices: 2,
            streams: 4,
            tenants: 8,
            processes: 4,
            kernels_per_second: 10_000,
            seed: 13,
            start_ns: 1_793_606_160_000_000_000,
            kernels_per_buffer: 30_000,
            external_correlation: true,
            api_records: true,
        }
    }
}

impl SynthConfig {
    /// Records per launch: the kernel and its EXTERNAL_CORRELATION and RUNTIME records when on.
    pub fn records_per_kernel(&self) -> u64 {
        1 + u64::from(self.external_correlation) + u64::from(self.api_records)
    }

    /// Every record generated: DEVICE records and [`SynthConfig::records_per_kernel`] per launch.
    pub fn records(&self) -> u64 {
        u64::from(self.devices) + self.kernels * self.records_per_kernel()
    }

    /// Bytes of all activity records ([`buffer`]'s length, a raw file's size).
    pub fn bytes(&self) -> u64 {
        let l = Layouts::sizes();
        u64::from(self.devices) * l.device as u64
            + self.kernels
                * (l.kernel as u64
                    + if self.external_correlation {
                        l.external as u64
                    } else {
                        0
                    }
                    + if self.api_records { l.api as u64 } else { 0 })
    }

    fn check(&self) -> Result<(), SynthError> {
        let fields = [
            ("devices", u64::from(self.devices)),
            ("streams", u64::from(self.streams)),
            ("tenants", u64::from(self.tenants)),
            ("processes", u64::from(self.processes)),
            ("kernels_per_second", self.kernels_per_second),
            ("kernels_per_buffer", self.kernels_per_buffer),
        ];
        if let Some((field, _)) = fields.iter().find(|(_, v)| *v == 0) {
            return Err(SynthError::Config {
                field,
                reason: "must be at least 1".into(),
            });
        }
        if self.devices > 64 || self.streams > 1_024 {
            return Err(SynthError::Config {
                field: if self.devices > 64 {
                    "devices"
                } else {
                    "streams"
                },
                reason: "at most 64 devices of 1 024 streams".into(),
            });
        }
        // Record time must stay within u64 ns: a generous bound of 1 s per launch.
        let span = self.kernels.saturating_mul(1_000_000_000);
        if self.start_ns.checked_add(span).is_none() {
            return Err(SynthError::Config {
                field: "start_ns",
                reason: "start plus the workload's span passes u64 ns".into(),
            });
        }
        Ok(())
    }
}

/// A workload that cannot be generated or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SynthError {
    /// A configuration field is out of range.
    #[error("synthetic workload: `{field}` {reason}")]
    Config {
        /// The [`SynthConfig`] field.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The record layouts of CUPTI 12.8 lack a field this generator writes (a bug).
    #[error("CUPTI 12.8 layout of {kind} has no field `{field}`")]
    Layout {
        /// The kind.
        kind: &'static str,
        /// The field.
        field: &'static str,
    },
    /// Writing the output failed.
    #[error("writing the synthetic workload: {0}")]
    Io(#[from] std::io::Error),
    /// Writing the `.gmr` failed.
    #[error("writing the synthetic .gmr: {0}")]
    Gmr(#[from] GmrError),
}

/// (offset, width) of the fields written, from [`ApiVersion::layouts`] (the tables checked
/// against the CUPTI headers).
#[derive(Debug, Clone)]
struct Layouts {
    kernel: usize,
    external: usize,
    api: usize,
    device: usize,
    k: KernelFields,
    e: [(usize, usize); 4],
    a: [(usize, usize); 8],
    d: Vec<(usize, usize, u64)>,
    d_uuid: (usize, usize),
    d_name: (usize, usize),
    d_id: (usize, usize),
}

#[derive(Debug, Clone)]
struct KernelFields {
    kind: (usize, usize),
    registers: (usize, usize),
    start: (usize, usize),
    end: (usize, usize),
    completed: (usize, usize),
    device: (usize, usize),
    context: (usize, usize),
    stream: (usize, usize),
    grid: [(usize, usize); 3],
    block: [(usize, usize); 3],
    static_smem: (usize, usize),
    dynamic_smem: (usize, usize),
    correlation: (usize, usize),
    grid_id: (usize, usize),
    name: (usize, usize),
}

/// Sizes only (cannot fail: the kinds exist in 12.8; 0 would make `bytes` wrong, which the
/// tests catch).
struct Sizes {
    kernel: usize,
    external: usize,
    api: usize,
    device: usize,
}

impl Layouts {
    fn sizes() -> Sizes {
        let s = |k| API.record_size(k).unwrap_or(0);
        Sizes {
            kernel: s(ActivityKind::CONCURRENT_KERNEL),
            external: s(ActivityKind::EXTERNAL_CORRELATION),
            api: s(ActivityKind::RUNTIME),
            device: s(ActivityKind::DEVICE),
        }
    }

    fn new() -> Result<Self, SynthError> {
        let layouts = API.layouts();
        let find = |kind: ActivityKind, kname: &'static str, field: &'static str| {
            layouts
                .iter()
                .find(|l| l.kind == kind)
                .and_then(|l| l.fields.iter().find(|f| f.name == field))
                .map(|f| (f.offset, f.width))
                .ok_or(SynthError::Layout { kind: kname, field })
        };
        let kf = |f| find(ActivityKind::CONCURRENT_KERNEL, "CONCURRENT_KERNEL", f);
        let ef = |f| {
            find(
                ActivityKind::EXTERNAL_CORRELATION,
                "EXTERNAL_CORRELATION",
                f,
            )
        };
        let af = |f| find(ActivityKind::RUNTIME, "RUNTIME", f);
        let df = |f| find(ActivityKind::DEVICE, "DEVICE", f);
        let k = KernelFields {
            kind: kf("kind")?,
            registers: kf("registersPerThread")?,
            start: kf("start")?,
            end: kf("end")?,
            completed: kf("completed")?,
            device: kf("deviceId")?,
            context: kf("contextId")?,
            stream: kf("streamId")?,
            grid: [kf("gridX")?, kf("gridY")?, kf("gridZ")?],
            block: [kf("blockX")?, kf("blockY")?, kf("blockZ")?],
            static_smem: kf("staticSharedMemory")?,
            dynamic_smem: kf("dynamicSharedMemory")?,
            correlation: kf("correlationId")?,
            grid_id: kf("gridId")?,
            name: kf("name")?,
        };
        let e = [
            ef("kind")?,
            ef("externalKind")?,
            ef("externalId")?,
            ef("correlationId")?,
        ];
        let a = [
            af("kind")?,
            af("cbid")?,
            af("start")?,
            af("end")?,
            af("processId")?,
            af("threadId")?,
            af("correlationId")?,
            af("returnValue")?,
        ];
        // An H100 SXM5 80 GB (`cudaGetDeviceProperties`).
        let d = vec![
            (df("kind")?, u64::from(ActivityKind::DEVICE.0)),
            (df("globalMemoryBandwidth")?, 3_352_320_000),
            (df("globalMemorySize")?, 85_045_870_592),
            (df("constantMemorySize")?, 65_536),
            (df("l2CacheSize")?, 52_428_800),
            (df("numThreadsPerWarp")?, 32),
            (df("coreClockRate")?, 1_980_000),
            (df("numMemcpyEngines")?, 3),
            (df("numMultiprocessors")?, 132),
            (df("maxIPC")?, 4),
            (df("maxWarpsPerMultiprocessor")?, 64),
            (df("maxBlocksPerMultiprocessor")?, 32),
            (df("maxSharedMemoryPerMultiprocessor")?, 233_472),
            (df("maxRegistersPerMultiprocessor")?, 65_536),
            (df("maxRegistersPerBlock")?, 65_536),
            (df("maxSharedMemoryPerBlock")?, 49_152),
            (df("maxThreadsPerBlock")?, 1_024),
            (df("computeCapabilityMajor")?, 9),
            (df("computeCapabilityMinor")?, 0),
            (df("eccEnabled")?, 1),
            (df("isCudaVisible")?, 1),
        ]
        .into_iter()
        .map(|((o, w), v)| (o, w, v))
        .collect();
        let s = Self::sizes();
        Ok(Layouts {
            kernel: s.kernel,
            external: s.external,
            api: s.api,
            device: s.device,
            k,
            e,
            a,
            d,
            d_uuid: df("uuid")?,
            d_name: df("name")?,
            d_id: df("id")?,
        })
    }
}

/// Writes the low `width` bytes of `v` at `off` (little-endian).
fn put(rec: &mut [u8], (off, width): (usize, usize), v: u64) {
    let bytes = v.to_le_bytes();
    if let (Some(dst), Some(src)) = (rec.get_mut(off..off + width), bytes.get(..width)) {
        dst.copy_from_slice(src);
    }
}

/// The UUID of device `d` of a workload seeded `seed`.
pub fn device_uuid(seed: u64, d: u32) -> [u8; 16] {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_0000_0000_0000 ^ u64::from(d));
    let mut u = [0u8; 16];
    rng.fill_bytes(&mut u);
    u
}

/// What a generator wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Records, every kind.
    pub records: u64,
    /// CONCURRENT_KERNEL records.
    pub kernels: u64,
    /// Bytes of activity records (without `.gmr` framing).
    pub record_bytes: u64,
    /// Earliest kernel start, ns (0 without kernels).
    pub first_start_ns: u64,
    /// Latest kernel end, ns (0 without kernels).
    pub last_end_ns: u64,
    /// Σ kernel durations, ns (`kernel_ns` of the whole workload).
    pub kernel_ns: u64,
}

/// Generates a workload's records in order, one launch at a time.
#[derive(Debug, Clone)]
pub struct Generator {
    cfg: SynthConfig,
    l: Layouts,
    rng: ChaCha8Rng,
    /// Launch clock, ns.
    clock: u64,
    /// Mean gap between launches, ns.
    gap: u64,
    /// End of the last kernel of each (device, stream), ns.
    cursor: Vec<u64>,
    /// Launches generated.
    done: u64,
    summary: Summary,
    kernel: Vec<u8>,
}

impl Generator {
    /// A generator of `cfg`.
    ///
    /// # Errors
    /// [`SynthError::Config`] for a field out of range.
    pub fn new(cfg: &SynthConfig) -> Result<Self, SynthError> {
        cfg.check()?;
        let l = Layouts::new()?;
        let kernel = vec![0u8; l.kernel];
        Ok(Generator {
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            clock: cfg.start_ns,
            gap: (1_000_000_000 / cfg.kernels_per_second).max(1),
            cursor: vec![0; (cfg.devices * cfg.streams) as usize],
            done: 0,
            summary: Summary::default(),
            kernel,
            l,
            cfg: cfg.clone(),
        })
    }

    /// The DEVICE records of every device, appended to `out`.
    pub fn device_records(&mut self, out: &mut Vec<u8>) {
        for d in 0..self.cfg.devices {
            let at = out.len();
            out.resize(at + self.l.device, 0);
            let rec = &mut out[at..];
            for &(o, w, v) in &self.l.d {
                put(rec, (o, w), v);
            }
            put(rec, self.l.d_id, u64::from(d));
            put(
                rec,
                self.l.d_name,
                DEVICE_NAME_PTR_BASE + u64::from(d) * 0x100,
            );
            let uuid = device_uuid(self.cfg.seed, d);
            if let Some(dst) = rec.get_mut(self.l.d_uuid.0..self.l.d_uuid.0 + 16) {
                dst.copy_from_slice(&uuid);
            }
            self.summary.records += 1;
            self.summary.record_bytes += self.l.device as u64;
        }
    }

    /// Launches left to generate.
    pub fn remaining(&self) -> u64 {
        self.cfg.kernels - self.done
    }

    fn below(&mut self, n: u64) -> u64 {
        // Multiply-shift: uniform enough for a benchmark, no division.
        ((u128::from(self.rng.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Appends the records of the next launch to `out`; `false` when all are generated.
    pub fn next_launch(&mut self, out: &mut Vec<u8>) -> bool {
        if self.done >= self.cfg.kernels {
            return false;
        }
        let i = self.done;
        self.done += 1;
        self.clock += self.below(2 * self.gap + 1);
        let launch = self.clock;
        let device = self.below(u64::from(self.cfg.devices)) as u32;
        let stream = self.below(u64::from(self.cfg.streams)) as u32;
        let tenant = self.below(u64::from(self.cfg.tenants)) as u32;
        let pid = PROCESS_ID_BASE + tenant % self.cfg.processes;
        // Correlation ids count up from 1 and skip 0 if they ever wrap.
        let corr = (i % u64::from(u32::MAX)) as u32 + 1;
        let large = self.below(500) == 0;
        let (config, duration, name) = if large {
            let c = LARGE[self.below(LARGE.len() as u64) as usize];
            let dur = 2_000_000 + self.below(18_000_001);
            (c, dur, 8 + self.below(4))
        } else {
            let c = SMALL[self.below(SMALL.len() as u64) as usize];
            let dur = 5_000 + self.below(145_001);
            (c, dur, self.below(8))
        };
        let slot = (device * self.cfg.streams + stream) as usize;
        let start = (launch + 5_000).max(self.cursor[slot]);
        let end = start + duration;
        self.cursor[slot] = end;

        if self.cfg.external_correlation {
            let at = out.len();
            out.resize(at + self.l.external, 0);
            let rec = &mut out[at..];
            let e = self.l.e;
            put(rec, e[0], u64::from(ActivityKind::EXTERNAL_CORRELATION.0));
            put(rec, e[1], u64::from(EXTERNAL_KIND_CUSTOM0));
            put(rec, e[2], TENANT_EXTERNAL_ID_BASE + u64::from(tenant));
            put(rec, e[3], u64::from(corr));
            self.summary.records += 1;
            self.summary.record_bytes += self.l.external as u64;
        }
        if self.cfg.api_records {
            let at = out.len();
            out.resize(at + self.l.api, 0);
            let rec = &mut out[at..];
            let a = self.l.a;
            put(rec, a[0], u64::from(ActivityKind::RUNTIME.0));
            put(rec, a[1], u64::from(CBID_CUDA_LAUNCH_KERNEL));
            put(rec, a[2], launch);
            put(rec, a[3], launch + 3_000);
            put(rec, a[4], u64::from(pid));
            put(rec, a[5], u64::from(pid) + 1);
            put(rec, a[6], u64::from(corr));
            put(rec, a[7], 0);
            self.summary.records += 1;
            self.summary.record_bytes += self.l.api as u64;
        }
        let k = &self.l.k;
        let rec = &mut self.kernel;
        put(rec, k.kind, u64::from(ActivityKind::CONCURRENT_KERNEL.0));
        put(rec, k.registers, u64::from(config.registers));
        put(rec, k.start, start);
        put(rec, k.end, end);
        put(rec, k.completed, end);
        put(rec, k.device, u64::from(device));
        put(rec, k.context, u64::from(device) + 1);
        put(rec, k.stream, u64::from(FIRST_STREAM_ID + stream));
        for (f, v) in k.grid.iter().zip(config.grid) {
            put(rec, *f, u64::from(v as u32));
        }
        for (f, v) in k.block.iter().zip(config.block) {
            put(rec, *f, u64::from(v as u32));
        }
        put(rec, k.static_smem, u64::from(config.static_smem as u32));
        put(rec, k.dynamic_smem, u64::from(config.dynamic_smem as u32));
        put(rec, k.correlation, u64::from(corr));
        put(rec, k.grid_id, i + 1);
        put(rec, k.name, NAME_PTR_BASE + name * 0x100);
        out.extend_from_slice(rec);

        let s = &mut self.summary;
        s.records += 1;
        s.kernels += 1;
        s.record_bytes += self.l.kernel as u64;
        s.first_start_ns = if s.kernels == 1 {
            start
        } else {
            s.first_start_ns.min(start)
        };
        s.last_end_ns = s.last_end_ns.max(end);
        s.kernel_ns += duration;
        true
    }

    /// Appends the records of up to `n` more launches; returns how many.
    pub fn next_launches(&mut self, out: &mut Vec<u8>, n: u64) -> u64 {
        let mut k = 0;
        while k < n && self.next_launch(out) {
            k += 1;
        }
        k
    }

    /// What was generated so far.
    pub fn summary(&self) -> &Summary {
        &self.summary
    }

    /// The strings of the workload's name pointers (kernel and device names), for a `.gmr`.
    pub fn string_table(&self) -> StringTable {
        let mut t = StringTable::new();
        for (i, n) in KERNEL_NAMES.iter().enumerate() {
            t.insert(NAME_PTR_BASE + i as u64 * 0x100, *n);
        }
        for d in 0..self.cfg.devices {
            t.insert(DEVICE_NAME_PTR_BASE + u64::from(d) * 0x100, DEVICE_NAME);
        }
        t
    }

    /// The `.gmr` header of the workload: CUPTI 12.8, the first process, every device.
    pub fn gmr_header(&self) -> GmrHeader {
        GmrHeader {
            cupti_api_version: API.cupti_api_version(),
            host: "synth".into(),
            clock: ClockPair {
                cupti_timestamp_ns: self.cfg.start_ns,
                unix_time_ns: self.cfg.start_ns,
            },
            process_id: PROCESS_ID_BASE,
            devices: (0..self.cfg.devices)
                .map(|d| GmrDevice {
                    id: d,
                    name: Some(DEVICE_NAME.into()),
                    uuid: Some(format!(
                        "GPU-{}",
                        format_uuid(&device_uuid(self.cfg.seed, d))
                    )),
                    sm_count: Some(132),
                    compute_capability: Some("9.0".into()),
                })
                .collect(),
            producer: Producer {
                name: "gpumeter-synth".into(),
                version: env!("CARGO_PKG_VERSION").into(),
            },
            instrumented: false,
            labels: Default::default(),
        }
    }
}

/// The whole workload as one buffer in memory (for benches; [`write_raw`] streams instead).
///
/// # Errors
/// As [`Generator::new`].
pub fn buffer(cfg: &SynthConfig) -> Result<Vec<u8>, SynthError> {
    let mut g = Generator::new(cfg)?;
    let mut out = Vec::with_capacity(usize::try_from(cfg.bytes()).unwrap_or(0));
    g.device_records(&mut out);
    while g.next_launch(&mut out) {}
    Ok(out)
}

/// The workload as activity buffers of [`SynthConfig::kernels_per_buffer`] launches each, as
/// CUPTI would complete them (the DEVICE records open the first).
///
/// # Errors
/// As [`Generator::new`].
pub fn buffers(cfg: &SynthConfig) -> Result<Vec<Vec<u8>>, SynthError> {
    let mut g = Generator::new(cfg)?;
    let mut out = Vec::new();
    let mut first = Vec::new();
    g.device_records(&mut first);
    let mut cur = first;
    loop {
        g.next_launches(&mut cur, cfg.kernels_per_buffer);
        if cur.is_empty() {
            break;
        }
        out.push(std::mem::take(&mut cur));
        if g.remaining() == 0 {
            break;
        }
    }
    Ok(out)
}

/// Writes the workload as one raw activity buffer (the format `gpumeter usage --format cupti`
/// reads; CUPTI 12.8 is its default API version), streaming: memory is one buffer of
/// [`SynthConfig::kernels_per_buffer`] launches.
///
/// # Errors
/// As [`Generator::new`]; [`SynthError::Io`] when writing fails.
pub fn write_raw<W: Write>(cfg: &SynthConfig, mut out: W) -> Result<Summary, SynthError> {
    let mut g = Generator::new(cfg)?;
    let mut buf = Vec::new();
    g.device_records(&mut buf);
    loop {
        g.next_launches(&mut buf, cfg.kernels_per_buffer);
        out.write_all(&buf)?;
        buf.clear();
        if g.remaining() == 0 {
            break;
        }
    }
    out.flush()?;
    Ok(g.summary().clone())
}

/// Writes the workload as a `.gmr` recording with the project's writer ([`GmrWriter`], as the
/// collector does): the header, a string table of the kernel and device names, one activity
/// buffer frame per [`SynthConfig::kernels_per_buffer`] launches, the end frame. Streaming.
///
/// # Errors
/// As [`write_raw`]; [`SynthError::Gmr`] when the writer fails.
pub fn write_gmr<W: Write>(cfg: &SynthConfig, out: W) -> Result<Summary, SynthError> {
    let mut g = Generator::new(cfg)?;
    let mut w = GmrWriter::new(out, &g.gmr_header())?;
    w.write_strings(&g.string_table())?;
    let mut buf = Vec::new();
    g.device_records(&mut buf);
    loop {
        g.next_launches(&mut buf, cfg.kernels_per_buffer);
        if !buf.is_empty() {
            w.write_buffer(&buf)?;
        }
        buf.clear();
        if g.remaining() == 0 {
            break;
        }
    }
    w.finish()?;
    Ok(g.summary().clone())
}

/// Where libcupti 12.8 is expected, for the cross-checks and benches that walk a generated
/// buffer with `cuptiActivityGetNextRecord`: `GPUMETER_CUPTI_LIB`, else
/// `$CUPTI12_LIB/libcupti.so.12` (`bindings/cupti/.wheels/env.sh`), else the wheel that
/// `bindings/cupti/fetch-wheels.sh` unpacks in this checkout.
pub fn libcupti12_path() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("GPUMETER_CUPTI_LIB") {
        return p.into();
    }
    if let Some(d) = std::env::var_os("CUPTI12_LIB") {
        return std::path::PathBuf::from(d).join("libcupti.so.12");
    }
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../bindings/cupti/.wheels/cu12/nvidia/cuda_cupti/lib/libcupti.so.12")
}
