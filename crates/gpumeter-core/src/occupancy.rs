//! Occupancy calculator: how many blocks of a kernel can be
//! resident on one SM at once, from the documented per-compute-capability rules.
//!
//! Sources, for every value below:
//!
//! * CUDA C++ Programming Guide, "Hardware Multithreading" / "Occupancy" (the rules: warps are
//!   allocated whole, registers are allocated per warp in units of 256 registers, shared memory is
//!   allocated per block in units of the architecture's granularity, the driver reserves 1 KiB of
//!   shared memory per block from compute capability 8.0 on, the L1/shared carveout is one of a
//!   fixed set of sizes per architecture and may only be raised above 48 KiB per block by an
//!   explicit opt-in: `cudaFuncAttributeMaxDynamicSharedMemorySize`).
//! * CUDA C++ Programming Guide, "Compute Capabilities", table "Technical Specifications per
//!   Compute Capability" and the per-architecture sections ("Compute Capability 7.x", "8.x",
//!   "9.0", "10.0", "12.0": "Shared Memory", capacities per SM and the carveout sizes).
//!
//! | cc   | max warps/SM | max blocks/SM | regs/SM | smem/SM (KiB) | opt-in smem/block (KiB) | carveouts (KiB) |
//! |------|--------------|---------------|---------|---------------|-------------------------|-----------------|
//! | 7.0  | 64 | 32 | 64 K | 96  | 96  | 0, 8, 16, 32, 64, 96 |
//! | 7.2  | 64 | 32 | 64 K | 96  | 96  | 0, 8, 16, 32, 64, 96 |
//! | 7.5  | 32 | 16 | 64 K | 64  | 64  | 32, 64 |
//! | 8.0  | 64 | 32 | 64 K | 164 | 163 | 0, 8, 16, 32, 64, 100, 132, 164 |
//! | 8.6  | 48 | 16 | 64 K | 100 | 99  | 0, 8, 16, 32, 64, 100 |
//! | 8.7  | 48 | 16 | 64 K | 164 | 163 | 0, 8, 16, 32, 64, 100, 132, 164 |
//! | 8.9  | 48 | 24 | 64 K | 100 | 99  | 0, 8, 16, 32, 64, 100 |
//! | 9.0  | 64 | 32 | 64 K | 228 | 227 | 0, 8, 16, 32, 64, 100, 132, 164, 196, 228 |
//! | 10.0 | 64 | 32 | 64 K | 228 | 227 | 0, 8, 16, 32, 64, 100, 132, 164, 196, 228 |
//! | 10.3 | 64 | 32 | 64 K | 228 | 227 | 0, 8, 16, 32, 64, 100, 132, 164, 196, 228 |
//! | 11.0 | 48 | 24 | 64 K | 228 | 227 | 0, 8, 16, 32, 64, 100, 132, 164, 196, 228 |
//! | 12.0 | 48 | 24 | 64 K | 100 | 99  | 0, 8, 16, 32, 64, 100 |
//! | 12.1 | 48 | 24 | 64 K | 100 | 99  | 0, 8, 16, 32, 64, 100 |
//!
//! Common to all of them: 32 threads per warp, at most 1024 threads and 64 K registers per block,
//! at most 255 registers per thread, 48 KiB of shared memory per block without opt-in, register
//! allocation unit 256 registers per warp, registers split evenly over 4 SM sub-partitions
//! (processing blocks) each holding whole warps. Shared-memory allocation granularity is
//! 256 bytes on 7.x and 128 bytes from 8.0 on; 1 KiB per block is reserved by the driver from
//! 8.0 on (`cudaDevAttrReservedSharedMemoryPerBlock`).
//!
//! From 9.0 on a block also holds hardware block barriers from a per-SM pool (two per block slot
//! on 9.0 and 10.0, one on the other 10.x, 11.x and 12.x parts); with the usual one barrier per
//! block this never binds.
//!
//! Two modes:
//!
//! * [`Mode::Corrected`] uses the kernel's own shared-memory configuration: a launch that used
//!   more than 48 KiB per block ran, so it had opted in, and the per-block limit is the opt-in
//!   limit; the carveout is the one CUDA picks by default, the smallest configurable size that
//!   holds the resident blocks (reported in [`Occupancy::carveout_bytes`]). Impossible launches
//!   are errors.
//! * [`Mode::KinetoCompatible`] reproduces PyTorch's profiler (Kineto): it always assumes the
//!   default 48 KiB per-block limit, so kernels that opted into more get 0 active blocks (and
//!   Kineto prints 0 %). Impossible launches give 0 active blocks, as Kineto does.
//!
//! This is a re-derivation from the documented rules; CUDA's `cuda_occupancy.h` is used only as
//! a test oracle (`tests/occupancy.rs`).

use num_rational::Ratio;

use crate::device::ComputeCapability;

/// Threads per warp on every supported architecture.
pub const WARP_SIZE: u32 = 32;
/// Registers are allocated to a warp in multiples of this many registers.
pub const REGISTER_ALLOCATION_UNIT: u32 = 256;
/// Maximum registers per thread.
pub const MAX_REGISTERS_PER_THREAD: u32 = 255;
/// Default (non-opt-in) shared memory per block, bytes.
pub const DEFAULT_SHARED_MEM_PER_BLOCK: u64 = 48 * 1024;

const KIB: u64 = 1024;

/// The per-SM and per-block limits of one compute capability, from the Programming Guide's
/// table (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchLimits {
    /// The compute capability these limits are for.
    pub cc: ComputeCapability,
    /// Maximum resident warps per SM.
    pub max_warps_per_sm: u32,
    /// Maximum resident blocks per SM.
    pub max_blocks_per_sm: u32,
    /// Maximum threads per block.
    pub max_threads_per_block: u32,
    /// 32-bit registers per SM.
    pub registers_per_sm: u32,
    /// 32-bit registers per block.
    pub registers_per_block: u32,
    /// SM sub-partitions (processing blocks) the register file is split over.
    pub sub_partitions: u32,
    /// Largest shared-memory carveout per SM, bytes (`sharedMemPerMultiprocessor`).
    pub shared_mem_per_sm: u64,
    /// Opt-in shared memory per block, bytes (`sharedMemPerBlockOptin`).
    pub shared_mem_per_block_optin: u64,
    /// Shared memory reserved by the driver per block, bytes.
    pub reserved_shared_mem_per_block: u64,
    /// Shared-memory allocation granularity, bytes.
    pub shared_mem_granularity: u64,
    /// The configurable shared-memory sizes per SM (carveouts), bytes, ascending.
    pub carveouts: &'static [u64],
    /// Hardware block barriers per block slot (the per-SM pool is this × max blocks per SM);
    /// `None` where barriers are not a separate limit (before 9.0).
    pub barriers_per_block_slot: Option<u32>,
}

const CARVE_VOLTA: &[u64] = &[0, 8 * KIB, 16 * KIB, 32 * KIB, 64 * KIB, 96 * KIB];
const CARVE_TURING: &[u64] = &[32 * KIB, 64 * KIB];
const CARVE_GA100: &[u64] = &[
    0,
    8 * KIB,
    16 * KIB,
    32 * KIB,
    64 * KIB,
    100 * KIB,
    132 * KIB,
    164 * KIB,
];
const CARVE_100K: &[u64] = &[0, 8 * KIB, 16 * KIB, 32 * KIB, 64 * KIB, 100 * KIB];
const CARVE_228K: &[u64] = &[
    0,
    8 * KIB,
    16 * KIB,
    32 * KIB,
    64 * KIB,
    100 * KIB,
    132 * KIB,
    164 * KIB,
    196 * KIB,
    228 * KIB,
];

/// Every compute capability [`arch_limits`] knows, in order (a test holds the two together).
pub const KNOWN_CAPABILITIES: [(u32, u32); 13] = [
    (7, 0),
    (7, 2),
    (7, 5),
    (8, 0),
    (8, 6),
    (8, 7),
    (8, 9),
    (9, 0),
    (10, 0),
    (10, 3),
    (11, 0),
    (12, 0),
    (12, 1),
];

/// The documented limits of `cc`, or [`OccupancyError::UnknownCapability`].
pub fn arch_limits(cc: ComputeCapability) -> Result<ArchLimits, OccupancyError> {
    // (max warps/SM, max blocks/SM, carveouts, opt-in smem/block KiB, barriers per block slot)
    let (warps, blocks, carveouts, optin_kib, barriers): (u32, u32, &'static [u64], u64, _) =
        match (cc.major, cc.minor) {
            (7, 0) | (7, 2) => (64, 32, CARVE_VOLTA, 96, None),
            (7, 5) => (32, 16, CARVE_TURING, 64, None),
            (8, 0) => (64, 32, CARVE_GA100, 163, None),
            (8, 6) => (48, 16, CARVE_100K, 99, None),
            (8, 7) => (48, 16, CARVE_GA100, 163, None),
            (8, 9) => (48, 24, CARVE_100K, 99, None),
            (9, 0) => (64, 32, CARVE_228K, 227, Some(2)),
            (10, 0) => (64, 32, CARVE_228K, 227, Some(2)),
            (10, 3) => (64, 32, CARVE_228K, 227, Some(1)),
            (11, 0) => (48, 24, CARVE_228K, 227, Some(1)),
            (12, 0) | (12, 1) => (48, 24, CARVE_100K, 99, Some(1)),
            _ => return Err(OccupancyError::UnknownCapability(cc)),
        };
    let ampere_plus = cc.major >= 8;
    Ok(ArchLimits {
        cc,
        max_warps_per_sm: warps,
        max_blocks_per_sm: blocks,
        max_threads_per_block: 1024,
        registers_per_sm: 64 * 1024,
        registers_per_block: 64 * 1024,
        sub_partitions: 4,
        shared_mem_per_sm: *carveouts.last().unwrap_or(&0),
        shared_mem_per_block_optin: optin_kib * KIB,
        reserved_shared_mem_per_block: if ampere_plus { KIB } else { 0 },
        shared_mem_granularity: if ampere_plus { 128 } else { 256 },
        carveouts,
        barriers_per_block_slot: barriers,
    })
}

/// One kernel launch's per-block resource use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Threads per block (blockDim.x × y × z).
    pub block_threads: u32,
    /// Registers per thread, as the compiler allocated them.
    pub registers_per_thread: u32,
    /// Shared memory per block, static + dynamic, bytes (without the driver's reserved bytes).
    pub shared_mem_per_block_bytes: u64,
    /// Hardware block barriers per block (1 for an ordinary kernel; 0 for none).
    pub barriers_per_block: u32,
}

impl LaunchConfig {
    /// A launch using one block barrier (the usual case).
    pub fn new(
        block_threads: u32,
        registers_per_thread: u32,
        shared_mem_per_block_bytes: u64,
    ) -> Self {
        LaunchConfig {
            block_threads,
            registers_per_thread,
            shared_mem_per_block_bytes,
            barriers_per_block: 1,
        }
    }
}

/// Which shared-memory assumptions to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The kernel's own configuration: opt-in per-block limit, default (smallest fitting)
    /// carveout; impossible launches are errors.
    Corrected,
    /// What PyTorch's profiler (Kineto) computes: default 48 KiB per-block limit; impossible
    /// launches give 0 active blocks.
    KinetoCompatible,
}

/// What bounds the number of resident blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LimitingFactor {
    /// Warp slots per SM.
    Warps,
    /// Registers per SM.
    Registers,
    /// Shared memory per SM (or per block, when 0).
    SharedMemory,
    /// Resident blocks per SM.
    Blocks,
    /// Block barriers per SM (9.0 and later).
    Barriers,
    /// Threads per block above the per-block maximum (active blocks 0).
    BlockSize,
}

/// The per-factor block limits (`None`: the factor does not bound the count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockLimits {
    /// Blocks allowed by warp slots.
    pub warps: u32,
    /// Blocks allowed by registers.
    pub registers: Option<u32>,
    /// Blocks allowed by shared memory.
    pub shared_mem: Option<u32>,
    /// Blocks allowed by the per-SM block limit.
    pub blocks: u32,
    /// Blocks allowed by block barriers.
    pub barriers: Option<u32>,
}

/// The result of [`active_blocks_per_sm`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Occupancy {
    /// Resident blocks per SM.
    pub active_blocks: u32,
    /// Resident warps per SM (active blocks × warps per block).
    pub active_warps: u32,
    /// Maximum resident warps per SM of the architecture.
    pub max_warps_per_sm: u32,
    /// The factor that bounds `active_blocks` (first in [`LimitingFactor`] order on ties).
    pub limiting_factor: LimitingFactor,
    /// Every factor's limit.
    pub limits: BlockLimits,
    /// Theoretical occupancy, percent: active warps ÷ max warps × 100, exact.
    pub occupancy_pct: Ratio<u64>,
    /// Shared memory allocated per block, bytes (rounded to the granularity, reserve included).
    pub allocated_shared_mem_per_block: u64,
    /// The carveout (shared memory per SM, bytes) CUDA configures: the smallest configurable
    /// size holding the active blocks.
    pub carveout_bytes: u64,
}

/// Why no occupancy can be given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OccupancyError {
    /// No limits are known for this compute capability.
    #[error("compute capability {0}: no occupancy limits known")]
    UnknownCapability(ComputeCapability),
    /// A block of zero threads.
    #[error("block of 0 threads")]
    EmptyBlock,
    /// More threads per block than the architecture allows.
    #[error("{threads} threads per block exceed the maximum of {max}")]
    BlockTooLarge {
        /// Threads requested.
        threads: u32,
        /// Maximum threads per block.
        max: u32,
    },
    /// More registers per thread than allowed.
    #[error("{registers} registers per thread exceed the maximum of {max}")]
    TooManyRegistersPerThread {
        /// Registers per thread requested.
        registers: u32,
        /// Maximum registers per thread.
        max: u32,
    },
    /// The block's warps do not fit in the register file.
    #[error(
        "{registers_per_warp} registers per warp × {warps} warps do not fit the register file"
    )]
    TooManyRegistersPerBlock {
        /// Registers allocated per warp.
        registers_per_warp: u32,
        /// Warps per block.
        warps: u32,
    },
    /// The block's shared memory exceeds the per-block limit.
    #[error("{allocated} bytes of shared memory per block exceed the limit of {limit}")]
    SharedMemoryPerBlock {
        /// Bytes allocated per block (reserve included, rounded).
        allocated: u64,
        /// The per-block limit (reserve included).
        limit: u64,
    },
}

fn round_up(x: u64, unit: u64) -> u64 {
    x.div_ceil(unit) * unit
}

/// Resident blocks per SM of `launch` on a device of compute capability `cc`.
pub fn active_blocks_per_sm(
    cc: ComputeCapability,
    launch: &LaunchConfig,
    mode: Mode,
) -> Result<Occupancy, OccupancyError> {
    let arch = arch_limits(cc)?;
    match compute(&arch, launch, mode) {
        Ok(occ) => Ok(occ),
        Err(e) if mode == Mode::KinetoCompatible && e.1.is_some() => Ok(zero(&arch, e.1, launch)),
        Err(e) => Err(e.0),
    }
}

fn zero(arch: &ArchLimits, factor: Option<LimitingFactor>, launch: &LaunchConfig) -> Occupancy {
    Occupancy {
        active_blocks: 0,
        active_warps: 0,
        max_warps_per_sm: arch.max_warps_per_sm,
        limiting_factor: factor.unwrap_or(LimitingFactor::BlockSize),
        limits: BlockLimits {
            warps: 0,
            registers: None,
            shared_mem: None,
            blocks: arch.max_blocks_per_sm,
            barriers: None,
        },
        occupancy_pct: Ratio::from_integer(0),
        allocated_shared_mem_per_block: round_up(
            launch.shared_mem_per_block_bytes + arch.reserved_shared_mem_per_block,
            arch.shared_mem_granularity,
        ),
        carveout_bytes: 0,
    }
}

type Failure = (OccupancyError, Option<LimitingFactor>);

fn compute(arch: &ArchLimits, launch: &LaunchConfig, mode: Mode) -> Result<Occupancy, Failure> {
    let threads = launch.block_threads;
    if threads == 0 {
        return Err((OccupancyError::EmptyBlock, None));
    }
    if threads > arch.max_threads_per_block {
        return Err((
            OccupancyError::BlockTooLarge {
                threads,
                max: arch.max_threads_per_block,
            },
            Some(LimitingFactor::BlockSize),
        ));
    }
    // Warps are allocated whole.
    let warps = threads.div_ceil(WARP_SIZE);
    let by_warps = arch.max_warps_per_sm / warps;

    let by_regs = blocks_by_registers(arch, launch, warps)?;
    let (allocated, by_smem) = blocks_by_shared_mem(arch, launch, mode)?;

    let by_blocks = arch.max_blocks_per_sm;
    let by_barriers = match (arch.barriers_per_block_slot, launch.barriers_per_block) {
        (Some(slot), n) if n > 0 => Some(slot * by_blocks / n),
        _ => None,
    };

    let candidates = [
        (LimitingFactor::Warps, Some(by_warps)),
        (LimitingFactor::Registers, by_regs),
        (LimitingFactor::SharedMemory, by_smem),
        (LimitingFactor::Blocks, Some(by_blocks)),
        (LimitingFactor::Barriers, by_barriers),
    ];
    let active = candidates
        .iter()
        .filter_map(|c| c.1)
        .min()
        .unwrap_or(by_blocks);
    let limiting_factor = candidates
        .iter()
        .find(|c| c.1 == Some(active))
        .map_or(LimitingFactor::Blocks, |c| c.0);
    let active_warps = active * warps;
    let needed = u64::from(active) * allocated;
    let carveout_bytes = arch
        .carveouts
        .iter()
        .copied()
        .find(|&c| c >= needed)
        .unwrap_or(arch.shared_mem_per_sm);
    Ok(Occupancy {
        active_blocks: active,
        active_warps,
        max_warps_per_sm: arch.max_warps_per_sm,
        limiting_factor,
        limits: BlockLimits {
            warps: by_warps,
            registers: by_regs,
            shared_mem: by_smem,
            blocks: by_blocks,
            barriers: by_barriers,
        },
        occupancy_pct: Ratio::new(
            u64::from(active_warps) * 100,
            u64::from(arch.max_warps_per_sm),
        ),
        allocated_shared_mem_per_block: allocated,
        carveout_bytes,
    })
}

/// Blocks per SM the registers allow (`None`: the kernel uses no registers, not a limit), for
/// blocks of `warps` warps.
fn blocks_by_registers(
    arch: &ArchLimits,
    launch: &LaunchConfig,
    warps: u32,
) -> Result<Option<u32>, Failure> {
    // Registers: per warp, rounded up to the allocation unit; each sub-partition holds whole
    // warps out of its quarter of the register file.
    let regs = launch.registers_per_thread;
    if regs > MAX_REGISTERS_PER_THREAD {
        return Err((
            OccupancyError::TooManyRegistersPerThread {
                registers: regs,
                max: MAX_REGISTERS_PER_THREAD,
            },
            Some(LimitingFactor::Registers),
        ));
    }
    let regs_per_warp = round_up(
        u64::from(regs) * u64::from(WARP_SIZE),
        u64::from(REGISTER_ALLOCATION_UNIT),
    ) as u32;
    // No registers: not a limit.
    let by_regs = match (arch.registers_per_sm / arch.sub_partitions).checked_div(regs_per_warp) {
        None => None,
        Some(warps_per_sub) => {
            let warps_per_sm = warps_per_sub * arch.sub_partitions;
            let per_block_ok =
                u64::from(regs_per_warp) * u64::from(warps) <= u64::from(arch.registers_per_block);
            let n = warps_per_sm / warps;
            if n == 0 || !per_block_ok {
                return Err((
                    OccupancyError::TooManyRegistersPerBlock {
                        registers_per_warp: regs_per_warp,
                        warps,
                    },
                    Some(LimitingFactor::Registers),
                ));
            }
            Some(n)
        }
    };
    Ok(by_regs)
}

/// The shared memory allocated per block (with the driver's reserve, rounded up to the
/// granularity) and the blocks per SM it allows (`None`: no shared memory, not a limit).
fn blocks_by_shared_mem(
    arch: &ArchLimits,
    launch: &LaunchConfig,
    mode: Mode,
) -> Result<(u64, Option<u32>), Failure> {
    // Shared memory: the driver's reserve is added, then rounded up to the granularity.
    let allocated = round_up(
        launch.shared_mem_per_block_bytes + arch.reserved_shared_mem_per_block,
        arch.shared_mem_granularity,
    );
    let per_block_limit = match mode {
        Mode::Corrected => arch.shared_mem_per_block_optin,
        Mode::KinetoCompatible => DEFAULT_SHARED_MEM_PER_BLOCK,
    } + arch.reserved_shared_mem_per_block;
    if allocated > per_block_limit {
        return Err((
            OccupancyError::SharedMemoryPerBlock {
                allocated,
                limit: per_block_limit,
            },
            Some(LimitingFactor::SharedMemory),
        ));
    }
    // No shared memory: not a limit.
    let by_smem = arch
        .shared_mem_per_sm
        .checked_div(allocated)
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX));
    Ok((allocated, by_smem))
}

/// PyTorch profiler's `est. achieved occupancy %`, exact: min(grid blocks ÷ SMs, active blocks
/// in [`Mode::KinetoCompatible`]) × threads per block ÷ max threads per SM × 100. Kineto prints
/// it rounded to an integer (see [`round_half_up`]).
pub fn kineto_achieved_occupancy_pct(
    cc: ComputeCapability,
    launch: &LaunchConfig,
    grid_blocks: u64,
    num_sms: u32,
) -> Result<Ratio<u64>, OccupancyError> {
    let occ = active_blocks_per_sm(cc, launch, Mode::KinetoCompatible)?;
    let sms = u64::from(num_sms.max(1));
    let grid_per_sm = Ratio::new(grid_blocks, sms);
    let active = Ratio::from_integer(u64::from(occ.active_blocks));
    let blocks = if grid_per_sm < active {
        grid_per_sm
    } else {
        active
    };
    let max_threads = u64::from(occ.max_warps_per_sm) * u64::from(WARP_SIZE);
    Ok(blocks * Ratio::new(u64::from(launch.block_threads) * 100, max_threads))
}

/// Rounds a non-negative ratio to the nearest integer, halves up.
pub fn round_half_up(r: Ratio<u64>) -> u64 {
    (r.numer() * 2 + r.denom()) / (r.denom() * 2)
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_capabilities_are_exactly_those_with_limits() {
        use super::{arch_limits, KNOWN_CAPABILITIES};
        use crate::ComputeCapability;
        for major in 0..=20 {
            for minor in 0..=9 {
                let cc = ComputeCapability { major, minor };
                assert_eq!(
                    arch_limits(cc).is_ok(),
                    KNOWN_CAPABILITIES.contains(&(major, minor)),
                    "{cc}"
                );
            }
        }
    }

    use super::*;

    fn cc(major: u32, minor: u32) -> ComputeCapability {
        ComputeCapability { major, minor }
    }

    #[test]
    fn a100_register_limited() {
        // 47 regs → 1536 per warp → 10 warps per sub-partition → 40 warps → 5 blocks of 8 warps.
        let occ = active_blocks_per_sm(cc(8, 0), &LaunchConfig::new(256, 47, 0), Mode::Corrected)
            .expect("fits");
        assert_eq!(occ.active_blocks, 5);
        assert_eq!(occ.limiting_factor, LimitingFactor::Registers);
        assert_eq!(occ.occupancy_pct, Ratio::new(125, 2));
    }

    #[test]
    fn opt_in_smem_is_zero_in_kineto_mode() {
        let launch = LaunchConfig::new(128, 32, 100 * 1024);
        let k = active_blocks_per_sm(cc(9, 0), &launch, Mode::KinetoCompatible).expect("ok");
        assert_eq!(k.active_blocks, 0);
        let c = active_blocks_per_sm(cc(9, 0), &launch, Mode::Corrected).expect("ok");
        assert_eq!(c.active_blocks, 2);
        assert_eq!(c.carveout_bytes, 228 * 1024);
        assert!(active_blocks_per_sm(cc(6, 1), &launch, Mode::Corrected).is_err());
    }

    #[test]
    fn rounding() {
        assert_eq!(round_half_up(Ratio::new(125, 2)), 63);
        assert_eq!(round_half_up(Ratio::new(124, 2)), 62);
    }
}
