//! Per (device, window) cells: their accumulators, the report's cell budget and the faults of bookkeeping.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use rustc_hash::FxHashMap;

use crate::report::MeterKind;
use crate::time::WindowSize;

/// A device's first fault in bookkeeping, turned into a [`MeterError`] by [`Meter::finish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DeviceFault {
    Overflow {
        meter: MeterKind,
        window: u64,
    },
    TooManyCells {
        what: &'static str,
        from: u64,
        to: u64,
        windows: u64,
    },
}

/// Adds `v` to a cell's quantity; on overflow keeps the first fault and leaves the quantity.
pub(super) fn add_checked(
    q: &mut u128,
    v: u128,
    fault: &mut Option<DeviceFault>,
    meter: MeterKind,
    window: u64,
) {
    match q.checked_add(v) {
        Some(n) => *q = n,
        None => {
            fault.get_or_insert(DeviceFault::Overflow { meter, window });
        }
    }
}

/// The number of (device, window) cells of a report and their limit, shared by its devices.
#[derive(Debug)]
pub(super) struct CellBudget {
    pub(super) used: AtomicU64,
    pub(super) limit: u64,
}

impl CellBudget {
    pub(super) fn used(&self) -> u64 {
        self.used.load(AtomicOrdering::Relaxed)
    }
}

/// The cell of window `w`, made (and counted against the report's budget) when new; past the
/// budget the device keeps a fault ([`MeterError::TooManyCells`]).
pub(super) fn cell_at<'c>(
    cells: &'c mut BTreeMap<u64, Cell>,
    budget: &CellBudget,
    fault: &mut Option<DeviceFault>,
    w: u64,
    window: WindowSize,
) -> &'c mut Cell {
    cells.entry(w).or_insert_with(|| {
        let used = budget.used.fetch_add(1, AtomicOrdering::Relaxed) + 1;
        if used > budget.limit {
            fault.get_or_insert(DeviceFault::TooManyCells {
                what: "work",
                from: w,
                to: w.saturating_add(window.ns()),
                windows: 1,
            });
        }
        Cell::default()
    })
}

/// A capped share factor `num / den` (reduced), applied to Σ len·held.
pub(super) type Factor = (u128, u128);

#[derive(Debug, Default, Clone)]
pub(super) struct Cell {
    /// Integer meters per (key, meter): counts, bytes, kernel_ns.
    pub(super) ints: FxHashMap<(u32, MeterKind), u128>,
    /// Busy ns per set of keys running (its id in [`DeviceState::sets`]).
    pub(super) busy: FxHashMap<u32, u128>,
    /// Uncapped SM·ns per key.
    pub(super) sm_exact: FxHashMap<u32, u128>,
    /// Capped SM·ns per (key, distinct cap factor `num / den`): Σ len·held; share = value ×
    /// num / den.
    pub(super) sm_capped: FxHashMap<(u32, Factor), u128>,
    /// Uncapped warp·ns per key: Σ len·held·warps.
    pub(super) warp_exact: FxHashMap<u32, u128>,
    /// Capped warp·ns per (key, distinct cap factor): Σ len·held·warps; share = value × num /
    /// den.
    pub(super) warp_capped: FxHashMap<(u32, Factor), u128>,
}
