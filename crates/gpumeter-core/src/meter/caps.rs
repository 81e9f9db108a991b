//! SMs held and their caps (DESIGN §4 "SMs held", "Cap"): per-partition and device cap factors, and resident warps per SM.

use super::*;

use std::collections::{BTreeMap, BTreeSet};

use crate::device::DeviceInfo;
use crate::occupancy::{active_blocks_per_sm, LaunchConfig, Mode, WARP_SIZE};

/// What the running work holds: sorted distinct attribution keys, and per (key, cap factor)
/// Σ SMs held and Σ held × resident warps (non-zero only). The factor is `None` when nothing
/// is capped, else the reduced `num / den` by which the partition cap and then the device cap
/// scale the SMs held (DESIGN §4 "Cap").
#[derive(Debug, Clone)]
pub(super) struct ActiveSummary {
    pub(super) keys: Vec<u32>,
    pub(super) held: Vec<(u32, Option<Factor>, u64, u128)>,
}

/// Resident warps per SM of kernel `k` holding `held` SMs on device `info` (DESIGN §4):
/// min(active blocks per SM, ⌈blocks ÷ held⌉) × warps per block, active blocks from the
/// occupancy calculator in corrected mode. `None` when a fact is unknown (the device's SM count
/// or compute capability; the kernel's grid, block, registers or shared memory) or the
/// calculator refuses the launch.
pub(super) fn resident_warps(
    info: &DeviceInfo,
    k: &crate::record::KernelLaunch,
    held: u32,
) -> Option<u32> {
    info.sm_count?;
    let cc = info.compute_capability?;
    let blocks = k.blocks()?;
    let block = k.block?;
    let threads = u64::from(block[0])
        .checked_mul(u64::from(block[1]))?
        .checked_mul(u64::from(block[2]))?;
    let threads = u32::try_from(threads).ok()?;
    let launch = LaunchConfig::new(threads, k.registers_per_thread?, k.shared_mem_bytes?);
    let occ = active_blocks_per_sm(cc, &launch, Mode::Corrected).ok()?;
    if held == 0 {
        return Some(0);
    }
    let warp_size = info
        .limits
        .warp_size
        .filter(|&w| w > 0)
        .unwrap_or(WARP_SIZE);
    let per_block = u64::from(threads.div_ceil(warp_size));
    let resident = u64::from(occ.active_blocks).min(blocks.div_ceil(u64::from(held)));
    u32::try_from(resident * per_block).ok()
}

impl DeviceState {
    /// The summary of the active set: per (key, cap factor) Σ held and Σ held × warps. The
    /// partition cap scales a green context's kernels by `S_p / H_p` when they hold more
    /// (`H_p`) than its `S_p` SMs; the device cap then scales everything by `S / T` when the
    /// SMs held after partition caps, `T`, exceed the device's `S` (DESIGN §4 "Cap").
    pub(super) fn summarize(&self) -> ActiveSummary {
        let mut part_held: BTreeMap<u32, u64> = BTreeMap::new();
        for a in &self.active {
            *part_held.entry(a.part).or_insert(0) += u64::from(a.held);
        }
        let part_sms = |p: u32| u64::from(self.partitions[(p - 1) as usize]);
        let after_parts: u64 = part_held
            .iter()
            .map(|(&p, &h)| if p == 0 { h } else { h.min(part_sms(p)) })
            .sum();
        let device: Factor = match self.info.sm_count.map(u64::from) {
            Some(n) if after_parts > n => (u128::from(n), u128::from(after_parts)),
            _ => (1, 1),
        };
        let factor = |p: u32| -> Option<Factor> {
            let part: Factor = match part_held.get(&p) {
                Some(&h) if p != 0 && h > part_sms(p) => (u128::from(part_sms(p)), u128::from(h)),
                _ => (1, 1),
            };
            let (num, den) = (part.0 * device.0, part.1 * device.1);
            if num == den {
                return None;
            }
            let g = num_integer::gcd(num, den);
            Some((num / g, den / g))
        };
        let mut per: BTreeMap<(u32, Option<Factor>), (u64, u128)> = BTreeMap::new();
        let mut keys = BTreeSet::new();
        for a in &self.active {
            keys.insert(a.key);
            let e = per.entry((a.key, factor(a.part))).or_insert((0, 0));
            e.0 += u64::from(a.held);
            e.1 += u128::from(a.held) * u128::from(a.warps);
        }
        ActiveSummary {
            keys: keys.into_iter().collect(),
            held: per
                .into_iter()
                .filter(|(_, e)| e.0 > 0)
                .map(|((k, f), (h, hw))| (k, f, h, hw))
                .collect(),
        }
    }
}
