//! Which meters a device's report carries: each meter that cannot be metered exactly on a
//! device gets a `not_meterable` entry and a warning, and its quantities are left out of the
//! device's usage (never a partial count).

use super::pm::PM_METERS;
use super::shares::CellQuantities;
use super::DeviceState;
use crate::report::{MeterKind, NotMeterable};
use crate::warning::{NotMeterableCode, Warning, WarningCode};

/// The meters of one device that its report carries (the others are not meterable).
#[derive(Debug, Clone, Copy)]
pub(super) struct Meterable {
    /// `sm_ns`: the SM count is known and every kernel has a grid.
    pub(super) sm: bool,
    /// `warp_ns`: the SM count and compute capability are known and every kernel's occupancy.
    pub(super) warp: bool,
    /// `warp_instructions`: every kernel of the device has an instruction count.
    pub(super) instructions: bool,
    /// The operation meters, in [`crate::OP_METERS`] order.
    pub(super) ops: [bool; 4],
    /// The PM-sampled meters, in [`PM_METERS`] order.
    pub(super) pm: [bool; 2],
    /// `energy_mj`: the device has energy and it can be apportioned by `sm_ns`.
    pub(super) energy: bool,
}

impl Meterable {
    /// Leaves out of a cell's `quantities` the meters the device does not carry
    /// (`warp_instructions`, the operation meters, the PM-sampled meters; `sm_ns` and
    /// `warp_ns` are left out where the cell's quantities are computed).
    pub(super) fn retain(&self, quantities: &mut CellQuantities) {
        if !self.instructions {
            quantities.retain(|(m, _)| *m != MeterKind::WarpInstructions);
        }
        quantities.retain(
            |(m, _)| match crate::OP_METERS.iter().position(|o| o == m) {
                Some(i) => self.ops[i],
                None => true,
            },
        );
        quantities.retain(|(m, _)| match PM_METERS.iter().position(|p| p == m) {
            Some(i) => self.pm[i],
            None => true,
        });
    }
}

/// Whether `sm_ns` is meterable on device `d` (its SM count known, every kernel with a grid),
/// with the `not_meterable` entries and warnings of `sm_ns` (and `warp_ns`, which builds on it,
/// when the SM count is unknown).
pub(super) fn sm_meterability(
    d: &DeviceState,
    not_meterable: &mut Vec<NotMeterable>,
    warnings: &mut Vec<Warning>,
) -> bool {
    let info = &d.info;
    let sm_meterable = info.sm_count.is_some() && d.kernels_without_grid == 0;
    // Without kernels there is no sm_ns or warp_ns to be unsure of.
    let has_kernels = d.kernels > 0;
    if info.sm_count.is_some() && d.kernels_without_grid > 0 {
        not_meterable.push(NotMeterable {
            meter: MeterKind::SmNs,
            code: NotMeterableCode::KernelsWithoutGrid,
            reason: format!(
                "{} kernels on this device have no grid (launch configuration), so the \
                 SMs they held are unknown",
                d.kernels_without_grid
            ),
        });
        warnings.push(Warning::new(
            WarningCode::NotMeterable,
            format!(
                "sm_ns is not meterable on device {} ({}): {} kernels have no grid",
                info.id, info.key, d.kernels_without_grid
            ),
        ));
    }
    if info.sm_count.is_none() && has_kernels {
        not_meterable.push(NotMeterable {
            meter: MeterKind::SmNs,
            code: NotMeterableCode::SmCountUnknown,
            reason: "the source gives no SM count for this device (no device table); \
                     pass --devices with its sm_count (warp_ns, which builds on sm_ns, \
                     is not meterable either)"
                .to_string(),
        });
        // warp_ns has its own entry, so the entries name the meters the warning names.
        not_meterable.push(NotMeterable {
            meter: MeterKind::WarpNs,
            code: NotMeterableCode::SmCountUnknown,
            reason: "the source gives no SM count for this device (no device table), and \
                     warp_ns builds on sm_ns; pass --devices with its sm_count"
                .to_string(),
        });
        warnings.push(Warning::new(
            WarningCode::NotMeterable,
            format!(
                "sm_ns and warp_ns are not meterable on device {} ({}): SM count unknown",
                info.id, info.key
            ),
        ));
    }
    sm_meterable
}

/// Whether `warp_ns` is meterable on device `d` (SM count and compute capability known, every
/// kernel's occupancy computed), with its `not_meterable` entry and warning when it is not (an
/// unknown SM count has its entry from [`sm_meterability`]).
pub(super) fn warp_meterability(
    d: &DeviceState,
    not_meterable: &mut Vec<NotMeterable>,
    warnings: &mut Vec<Warning>,
) -> bool {
    let info = &d.info;
    let has_kernels = d.kernels > 0;
    let warp_meterable = info.sm_count.is_some()
        && info.compute_capability.is_some()
        && d.kernels_without_occupancy == 0;
    // An unknown SM count is reported above, for sm_ns and warp_ns.
    if !warp_meterable && info.sm_count.is_some() && has_kernels {
        let unknown_cc = info
            .compute_capability
            .filter(|&cc| crate::occupancy::arch_limits(cc).is_err());
        let code = if info.compute_capability.is_none() {
            NotMeterableCode::ComputeCapabilityUnknown
        } else if unknown_cc.is_some() {
            NotMeterableCode::ComputeCapabilityUnsupported
        } else {
            NotMeterableCode::KernelsWithoutOccupancy
        };
        let why = if info.compute_capability.is_none() {
            "the compute capability of this device is unknown, so the occupancy \
             calculator cannot run; pass --devices with its compute_capability"
                .to_string()
        } else if let Some(cc) = unknown_cc {
            let known: Vec<String> = crate::occupancy::KNOWN_CAPABILITIES
                .iter()
                .map(|(a, b)| format!("{a}.{b}"))
                .collect();
            format!(
                "the device's compute_capability = {cc} is not one the occupancy \
                 calculator knows ({}), so resident warps cannot be computed; check the \
                 source's device properties or the --devices catalog",
                known.join(", ")
            )
        } else {
            format!(
                "{} kernels on this device have no launch configuration the occupancy \
                 calculator accepts (grid, block, registers per thread, shared memory), \
                 so their resident warps are unknown",
                d.kernels_without_occupancy
            )
        };
        warnings.push(Warning::new(
            WarningCode::NotMeterable,
            format!(
                "warp_ns is not meterable on device {} ({}): {why}",
                info.id, info.key
            ),
        ));
        not_meterable.push(NotMeterable {
            meter: MeterKind::WarpNs,
            code,
            reason: why,
        });
    }
    warp_meterable
}

/// Whether `warp_instructions` is meterable on device `d`: all or nothing per device (a
/// partial count under-bills), with its `not_meterable` entry and warning when some kernels
/// have a count and others none.
pub(super) fn instruction_meterability(
    d: &DeviceState,
    not_meterable: &mut Vec<NotMeterable>,
    warnings: &mut Vec<Warning>,
) -> bool {
    let info = &d.info;
    let instr_meterable = d.kernels_with_instructions > 0 && d.kernels_without_instructions == 0;
    if d.kernels_with_instructions > 0 && d.kernels_without_instructions > 0 {
        let why = format!(
            "{} of {} kernels on this device have no instruction count (SASS metrics or \
             INSTRUCTION_EXECUTION data), so the device's total is unknown",
            d.kernels_without_instructions,
            d.kernels_with_instructions + d.kernels_without_instructions
        );
        warnings.push(Warning::new(
            WarningCode::NotMeterable,
            format!(
                "warp_instructions is not meterable on device {} ({}): {why}",
                info.id, info.key
            ),
        ));
        not_meterable.push(NotMeterable {
            meter: MeterKind::WarpInstructions,
            code: NotMeterableCode::KernelsWithoutInstructions,
            reason: why,
        });
    }
    instr_meterable
}

/// Whether each operation meter ([`crate::OP_METERS`]) is meterable on device `d`: each all
/// or nothing per device, as `warp_instructions`, with the `not_meterable` entries and
/// warnings of those that are not.
pub(super) fn ops_meterability(
    d: &DeviceState,
    not_meterable: &mut Vec<NotMeterable>,
    warnings: &mut Vec<Warning>,
) -> [bool; 4] {
    let info = &d.info;
    let mut ops_meterable = [false; 4];
    for (i, m) in crate::OP_METERS.iter().enumerate() {
        let (with, without) = (d.kernels_with_ops[i], d.kernels_without_ops[i]);
        ops_meterable[i] = with > 0 && without == 0;
        if with > 0 && without > 0 {
            let why = format!(
                "{without} of {} kernels on this device have no {m} count (CUPTI's \
                 SASS op or tensor-path counters of their profiler range), so the \
                 device's total is unknown",
                with + without
            );
            warnings.push(Warning::new(
                WarningCode::NotMeterable,
                format!(
                    "{m} is not meterable on device {} ({}): {why}",
                    info.id, info.key
                ),
            ));
            not_meterable.push(NotMeterable {
                meter: *m,
                code: NotMeterableCode::KernelsWithoutOpCounts,
                reason: why,
            });
        }
    }
    ops_meterable
}

/// Whether `energy_mj` is meterable on device `d` with energy in some window (`has_energy`):
/// `apportionable` (`sm_ns` meterable, or no kernel: a device without kernels has no `sm_ns`
/// anywhere and its energy is all idle); its `not_meterable` entry and warning when not.
pub(super) fn energy_meterability(
    d: &DeviceState,
    has_energy: bool,
    apportionable: bool,
    not_meterable: &mut Vec<NotMeterable>,
    warnings: &mut Vec<Warning>,
) -> bool {
    let info = &d.info;
    let energy_meterable = has_energy && apportionable;
    if has_energy && !energy_meterable {
        let why = "energy is apportioned to tenants by sm_ns, which is not meterable on \
                   this device"
            .to_string();
        warnings.push(Warning::new(
            WarningCode::NotMeterable,
            format!(
                "energy_mj is not meterable on device {} ({}): {why}",
                info.id, info.key
            ),
        ));
        not_meterable.push(NotMeterable {
            meter: MeterKind::EnergyMj,
            code: NotMeterableCode::SmNsNotMeterable,
            reason: why,
        });
    }
    energy_meterable
}

/// Whether each PM-sampled meter ([`PM_METERS`]) is meterable on device `d`, with the
/// `not_meterable` entries and warnings of those that are not, and the device's warnings of
/// PM sample overflow and invalid samples. `apportionable`: `sm_ns` is meterable on the device
/// or it ran no kernel (everything is idle).
pub(super) fn pm_meterability(
    d: &DeviceState,
    apportionable: bool,
    not_meterable: &mut Vec<NotMeterable>,
    warnings: &mut Vec<Warning>,
) -> [bool; 2] {
    let info = &d.info;
    let sampled = d.pm.carrying.iter().any(|&n| n > 0);
    let mut out = [false; 2];
    for (i, &meter) in PM_METERS.iter().enumerate() {
        let counters = match meter {
            MeterKind::SmActiveNs => "sm_active_cycles and sm_elapsed_cycles",
            _ => "dram_read_bytes and dram_write_bytes",
        };
        let (code, why) = if d.pm.carrying[i] > 0 {
            if apportionable {
                out[i] = true;
                continue;
            }
            (
                NotMeterableCode::SmNsNotMeterable,
                format!(
                    "{} is apportioned to tenants by sm_ns, which is not meterable on this device",
                    meter.as_str()
                ),
            )
        } else if sampled {
            (
                NotMeterableCode::NotSampled,
                format!("no PM sample of this device carries {counters}"),
            )
        } else {
            continue;
        };
        warnings.push(Warning::new(
            WarningCode::NotMeterable,
            format!(
                "{} is not meterable on device {} ({}): {why}",
                meter.as_str(),
                info.id,
                info.key
            ),
        ));
        not_meterable.push(NotMeterable {
            meter,
            code,
            reason: why,
        });
    }
    if d.pm.overflows > 0 {
        warnings.push(Warning::new(
            WarningCode::PmSampleOverflow,
            format!(
                "CUPTI PM sampling's hardware buffer overflowed {} {} on device {} ({}): the \
                 samples it overwrote are not metered (sm_active_ns and dram_bytes miss what \
                 they measured); at least {} lost (loss pm_sample_overflow)",
                d.pm.overflows,
                if d.pm.overflows == 1 { "time" } else { "times" },
                info.id,
                info.key,
                d.pm.overflows
            ),
        ));
    }
    if let Some(first) = &d.pm.first_invalid {
        warnings.push(Warning::new(
            WarningCode::InvalidField,
            format!(
                "{} PM samples of device {} ({}) have a field that cannot be metered and are \
                 lost as invalid_field; the first: {first}",
                d.pm.invalid, info.id, info.key
            ),
        ));
    }
    out
}
