//! SMs held and their caps: per-partition and device cap factors, and resident warps per SM.

use super::*;

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::device::{ComputeCapability, DeviceInfo};
use crate::occupancy::{active_blocks_per_sm, LaunchConfig, Mode, WARP_SIZE};
use crate::record::KernelLaunch;

/// What the running work holds: sorted distinct attribution keys, and per (key, cap factor)
/// Σ SMs held and Σ held × resident warps (non-zero only). The factor is none when nothing
/// is capped, else the reduced `num / den` by which the partition cap and then the device cap
/// scale the SMs held, interned to an id ([`Slots::factor`]).
///
/// The keys are interned to a set id ([`DeviceState::sets`]) and its busy slot `busy`; each
/// `held` entry is (SM·ns slot, warp·ns slot or [`NO_SLOT`] when Σ held × warps is 0, Σ held,
/// Σ held × warps), the slots of its (key, factor) ([`Slots`]). `held` and `factors` are
/// buffers rebuilt in place.
#[derive(Debug, Clone, Default)]
pub(super) struct ActiveSummary {
    pub(super) busy: u32,
    pub(super) held: Vec<(u32, u32, u64, u128)>,
    /// Cap factor id per partition index + 1 (0: the device).
    factors: Vec<Option<u32>>,
}

/// What the occupancy calculator's answer depends on: the compute capability, threads per
/// block, registers per thread and shared memory per block (bytes). The grid and the SMs held
/// only enter afterwards, by arithmetic.
type OccupancyKey = (ComputeCapability, u32, u32, u64);

/// The occupancy calculator's active blocks per SM per distinct (compute capability, block
/// size, registers, shared memory), so it runs once per launch configuration, not per record;
/// `None` caches a launch it refuses. Bounded: emptied when it holds 4096 configurations.
#[derive(Debug, Clone, Default)]
pub(super) struct OccupancyCache(FxHashMap<OccupancyKey, Option<u32>>);

impl OccupancyCache {
    /// [`resident_warps_with`], with the calculator's answer cached.
    pub(super) fn resident_warps(
        &mut self,
        info: &DeviceInfo,
        k: &KernelLaunch,
        held: u32,
    ) -> Option<u32> {
        resident_warps_with(info, k, held, |key| {
            if let Some(&a) = self.0.get(&key) {
                return a;
            }
            if self.0.len() >= 4096 {
                self.0.clear();
            }
            let a = active_blocks(key);
            self.0.insert(key, a);
            a
        })
    }
}

/// Active blocks per SM of a launch configuration: the occupancy calculator in corrected
/// mode; `None` when it refuses the launch.
fn active_blocks((cc, threads, registers, shared): OccupancyKey) -> Option<u32> {
    let launch = LaunchConfig::new(threads, registers, shared);
    active_blocks_per_sm(cc, &launch, Mode::Corrected)
        .ok()
        .map(|o| o.active_blocks)
}

/// Resident warps per SM of kernel `k` holding `held` SMs on device `info`:
/// min(active blocks per SM, ⌈blocks ÷ held⌉) × warps per block, active blocks from the
/// occupancy calculator in corrected mode. `None` when a fact is unknown (the device's SM count
/// or compute capability; the kernel's grid, block, registers or shared memory) or the
/// calculator refuses the launch. `active` answers the calculator's active blocks per SM for
/// a configuration ([`active_blocks`], or a cache of it).
fn resident_warps_with(
    info: &DeviceInfo,
    k: &KernelLaunch,
    held: u32,
    active: impl FnOnce(OccupancyKey) -> Option<u32>,
) -> Option<u32> {
    info.sm_count?;
    let cc = info.compute_capability?;
    let blocks = k.blocks()?;
    let block = k.block?;
    let threads = u64::from(block[0])
        .checked_mul(u64::from(block[1]))?
        .checked_mul(u64::from(block[2]))?;
    let threads = u32::try_from(threads).ok()?;
    let active_blocks = active((cc, threads, k.registers_per_thread?, k.shared_mem_bytes?))?;
    if held == 0 {
        return Some(0);
    }
    let warp_size = info
        .limits
        .warp_size
        .filter(|&w| w > 0)
        .unwrap_or(WARP_SIZE);
    let per_block = u64::from(threads.div_ceil(warp_size));
    let resident = u64::from(active_blocks).min(blocks.div_ceil(u64::from(held)));
    u32::try_from(resident * per_block).ok()
}

impl DeviceState {
    /// Rebuilds the summary of the running set from its sums: per (key, cap factor) Σ held
    /// and Σ held × warps with their slots, and the set of keys interned to its busy slot. The partition cap scales a green
    /// context's kernels by `S_p / H_p` when they hold more (`H_p`) than its `S_p` SMs; the
    /// device cap then scales everything by `S / T` when the SMs held after partition caps,
    /// `T`, exceed the device's `S`. O(distinct (key, partition) running),
    /// no allocation once the buffers have grown.
    pub(super) fn summarize(&mut self) {
        let run = &mut self.run;
        run.changed = false;
        let partitions = &self.partitions;
        let part_sms = |p: usize| u64::from(partitions[p - 1]);
        let after_parts: u64 = run
            .per_part
            .iter()
            .enumerate()
            .map(|(p, &h)| if p == 0 { h } else { h.min(part_sms(p)) })
            .sum();
        let device: Factor = match self.info.sm_count.map(u64::from) {
            Some(n) if after_parts > n => (u128::from(n), u128::from(after_parts)),
            _ => (1, 1),
        };
        let summary = &mut self.summary;
        summary.factors.clear();
        for (p, &h) in run.per_part.iter().enumerate() {
            let part: Factor = if p != 0 && h > part_sms(p) {
                (u128::from(part_sms(p)), u128::from(h))
            } else {
                (1, 1)
            };
            let (num, den) = (part.0 * device.0, part.1 * device.1);
            summary.factors.push(if num == den {
                None
            } else {
                let g = num_integer::gcd(num, den);
                Some(self.slots.factor((num / g, den / g)))
            });
        }
        summary.held.clear();
        for (&(k, p), &(_, h, hw)) in &run.per_kp {
            if h > 0 {
                let f = summary.factors[p as usize];
                let (sm, warp) = self.slots.held(k, f, hw > 0);
                summary.held.push((sm, warp, h, hw));
            }
        }
        let set = match self.set_index.get(run.keys.as_slice()) {
            Some(&id) => id,
            None => {
                let id = self.sets.len() as u32;
                let set: Arc<[u32]> = Arc::from(run.keys.as_slice());
                self.sets.push(Arc::clone(&set));
                self.set_index.insert(set, id);
                id
            }
        };
        summary.busy = self.slots.busy(set);
    }
}
