//! The streaming [`Meter`]: activity records in, a [`UsageReport`] out.
//!
//! Per device, records are held in a reorder buffer until the *sweep* passes them: the sweep
//! runs at `max start seen − reordering horizon`, so records may arrive out of order by up to the
//! horizon; older ones are loss (`late`). The sweep walks elementary intervals (between record
//! starts, ends and window edges) with the set of work running in them and books:
//!
//! * `gpu_busy_ns`: the interval's length to the *set* of attribution keys running, divided
//!   equally among the set's tenants when the report is built;
//! * `sm_ns`: length × SMs held per kernel, where SMs held = min(blocks, device SMs); when the
//!   kernels running hold more SMs than the device has, each kernel's share is scaled by
//!   `SMs / Σ held` (kept exact as `Σ len·held` per distinct `Σ held`);
//! * `warp_ns`: the same with each kernel's SMs held weighted by its resident warps per SM
//!   (computed once per record from the occupancy calculator, corrected mode): length ×
//!   held × warps, scaled by the same `SMs / Σ held` when capped.
//!
//! Counts and bytes go to the window of the record's start; `kernel_ns` is split at window
//! edges as records arrive. Fractions become integers once per (device, window, meter) cell by
//! the largest-remainder method, ties to the tenant whose name sorts first. Memory is bounded by
//! the horizon (reorder and duplicate buffers) and by what the cells hold (per cell, the
//! quantities booked in it: at most its attribution keys × meters), not by records.
//!
//! Where each part lives: this file holds the public API ([`Meter`], [`MeterConfig`],
//! [`MeterError`], [`TenantMap`]) and the per-device state; `work.rs` checks a work record and
//! books what is booked on arrival (counts, bytes, `kernel_ns`); `dup.rs` detects duplicates
//! (`lanes.rs`: work records' keys per (context, stream), compared only when out of order);
//! `sweep.rs` runs the reorder buffer and books elementary intervals (`gpu_busy_ns`, `sm_ns`,
//! `warp_ns`); `caps.rs` computes SMs held, resident warps and the partition and device caps;
//! `cells.rs` holds the per-(device, window) accumulators (flat arrays of interned slots) and
//! the cell budget; `memory.rs`
//! pairs allocations and books `memory_byte_ns`; `energy.rs` books `energy_mj`; `pm.rs` holds
//! PM samples until the sweep passes them and apportions `sm_active_ns` and `dram_bytes` by the
//! `sm_ns` the sweep booked inside each; `opening.rs`
//! takes opening state and report chains; `devices.rs` registers devices and partitions;
//! `assemble.rs` drains and builds reports, with `meterable.rs` deciding which meters each
//! device's report carries and `shares.rs` turning a cell's exact shares into integers.

mod assemble;
mod caps;
mod cells;
mod devices;
mod dup;
#[cfg(test)]
mod dup_tests;
mod energy;
mod lanes;
mod memory;
mod meterable;
mod opening;
mod pm;
mod queue;
mod shares;
mod sweep;
mod work;

pub use crate::report::{STREAM_FORMAT, STREAM_SNAPSHOT_FORMAT};
pub use sweep::MAX_RESIDENT_GRIDS;

use caps::*;
use cells::*;
use dup::*;
use energy::*;
use memory::*;
use opening::*;
use pm::*;
use queue::MostlySorted;
use sweep::*;

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::device::DeviceInfo;
use crate::record::{ActivityRecord, DeviceSlot, LossReason, PartitionId};
use crate::report::{DigestError, MeterKind, RecordCounts, SourceEntry, UsageReport};
use crate::tenant::TenantName;
use crate::time::{rfc3339, rfc3339_ns, WindowSize, NS_PER_SECOND};
use crate::warning::{Warning, WarningCode};

/// Default reordering horizon: 60 s of record time.
pub const DEFAULT_REORDER_HORIZON_NS: u64 = 60 * NS_PER_SECOND;

/// Default of [`MeterConfig::max_cells`]: 200 000 (device, window) cells — 22 years of 1 h
/// windows of one GPU, or 17 days of 60 s windows of eight. Building a report takes about
/// 3 KB of memory per cell (its usage rows, the canonical JSON of its digest), so the default
/// bounds a report at under a gigabyte.
pub const DEFAULT_MAX_CELLS: u64 = 200_000;

/// How a [`Meter`] windows, attributes and reorders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeterConfig {
    /// Window size (default 1 h).
    pub window: WindowSize,
    /// The source's tenant (`--tenant`): used when no tenant-map rule matches.
    pub tenant: Option<TenantName>,
    /// How far, in ns of record time, records may arrive out of order per device.
    pub reorder_horizon_ns: u64,
    /// The most (device, window) cells a report holds, all devices together: what bounds the
    /// meter's memory and the report's size. Memory held is billed for as long as it is held,
    /// so one allocation, or an energy counter sampled a week apart, can span any
    /// number of windows; a hold or an energy run that would pass this many cells, or work that
    /// does, makes [`Meter::finish`] fail with [`MeterError::TooManyCells`] (a kernel dated
    /// centuries away from the rest, say) instead of exhausting memory; holds and energy are
    /// refused before any of their cells is made.
    pub max_cells: u64,
}

impl Default for MeterConfig {
    fn default() -> Self {
        MeterConfig {
            window: WindowSize::HOUR,
            tenant: None,
            reorder_horizon_ns: DEFAULT_REORDER_HORIZON_NS,
            max_cells: DEFAULT_MAX_CELLS,
        }
    }
}

/// Tenant-map rules: external correlation ids and process ids to
/// tenants. Resolved when the report is built, so rules may arrive after the records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantMap {
    /// External correlation id → tenant.
    pub external: HashMap<u64, TenantName>,
    /// Process id → tenant.
    pub pid: HashMap<u32, TenantName>,
}

/// Why [`Meter::finish`] cannot build a report. Each names the device and the meter or span,
/// so the input at fault can be found; nothing is rounded or clamped instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MeterError {
    /// The report could not be serialized for its digest.
    #[error(transparent)]
    Digest(#[from] DigestError),
    /// A quantity (a cell, a tenant's share or a total) exceeds `u128::MAX` canonical units.
    /// Quantities are exact or not given: never a saturated number in a bill.
    #[error(
        "device {device} ({device_key}): {meter}{} exceeds 2^128 - 1 {} (the largest quantity          a report holds): it cannot be billed exactly",
        match window_start { Some(w) => format!(" in the window starting {w}"), None => " in total".to_string() },
        meter.canonical_unit()
    )]
    QuantityOverflow {
        /// Device id within its source.
        device: u32,
        /// Identity of the device.
        device_key: String,
        /// The meter.
        meter: MeterKind,
        /// The window, RFC 3339, or `None` for a total over windows.
        window_start: Option<String>,
    },
    /// [`Meter::drain`] was asked of a meter that holds energy samples: energy is apportioned
    /// over whole runs of samples, which a drain cannot cut yet.
    #[error(
        "this meter holds energy samples: energy_mj is apportioned over whole runs of samples, \
         so its windows cannot be drained; build one report with finish or snapshot instead"
    )]
    DrainWithEnergy,
    /// Memory held, an energy run or work over a span that would take the report past
    /// [`MeterConfig::max_cells`] (device, window) cells.
    #[error(
        "device {device} ({device_key}): {what} from {from} to {to} spans {windows} windows of \
         {window_seconds} s, which would take the report past the {limit} (device, window) cells \
         it holds; check the inputs' times (a record dated far from the others?), or use a \
         larger --window"
    )]
    TooManyCells {
        /// Device id within its source.
        device: u32,
        /// Identity of the device.
        device_key: String,
        /// What spans them (`memory held`, `energy samples`, `PM samples`, `work`).
        what: &'static str,
        /// Start of the span, RFC 3339.
        from: String,
        /// End of the span, RFC 3339.
        to: String,
        /// Windows the span touches.
        windows: u64,
        /// Window size, seconds.
        window_seconds: u64,
        /// The limit ([`MeterConfig::max_cells`]).
        limit: u64,
    },
}

/// Records lost for one reason: a count, and whether it is only a lower bound (the source
/// could not tell how many records a damaged part held).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct LossCount {
    records: u64,
    lower_bound: bool,
}

impl LossCount {
    /// Adds `n` records; a sum past `u64::MAX` stays at the maximum and becomes a lower bound
    /// (never a clamped count that claims to be exact).
    fn add(&mut self, n: u64, lower_bound: bool) {
        let sum = self.records.checked_add(n);
        self.records = sum.unwrap_or(u64::MAX);
        self.lower_bound |= lower_bound || sum.is_none();
    }
}

/// An input about to be metered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceInfo {
    /// File name (no directories).
    pub name: String,
    /// Format name (`kineto`, `nsys`, …).
    pub format: String,
    /// SHA-256 of the bytes, lowercase hex: the source's identity.
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct AttrKey {
    external_id: Option<u64>,
    process_id: Option<u32>,
    source_tenant: Option<TenantName>,
}

#[derive(Debug, Clone)]
struct DeviceState {
    info: DeviceInfo,
    /// Every description of the device with the SHA-256 of the source that gave it.
    descriptions: Vec<(String, DeviceInfo)>,
    /// Work waiting for the sweep, by (start, arrival).
    pending: MostlySorted<Reverse<Pending>>,
    /// The records running at the sweep's position.
    run: Running,
    /// Sweep position: everything before it is booked; a record starting before it is late.
    swept_to: u64,
    started: bool,
    max_start: u64,
    dups: DupTable,
    cells: Cells,
    /// What the cells accumulate: interned (key, meter), running-set and (key, cap factor)
    /// slots, and the distinct cap factors.
    slots: Slots,
    loss: BTreeMap<LossReason, LossCount>,
    /// The first quantity overflow or window-limit breach; [`Meter::finish`] fails with it.
    fault: Option<DeviceFault>,
    /// The report's cell count and limit, shared by every device ([`MeterConfig::max_cells`]).
    budget: Arc<CellBudget>,
    records: u64,
    /// Kernels metered without a grid: their SMs held are unknown, so sm_ns is not meterable.
    kernels_without_grid: u64,
    /// Kernels whose resident warps per SM could not be computed (a device or launch fact
    /// unknown, or a launch the occupancy calculator refuses): warp_ns is not meterable.
    kernels_without_occupancy: u64,
    /// Summary of the running set, rebuilt when the set changed.
    summary: ActiveSummary,
    /// Every distinct set of keys that ran, by id (cells book busy time per set id).
    sets: Vec<Arc<[u32]>>,
    /// Set → id.
    set_index: FxHashMap<Arc<[u32]>, u32>,
    /// Resident warps per distinct launch configuration.
    occupancy: OccupancyCache,
    /// SMs of each partition (green context), index = [`PartitionId`].
    partitions: Vec<u32>,
    /// Memory events waiting for the sweep.
    mem_pending: MostlySorted<Reverse<MemPending>>,
    /// Allocations held, by (process id, address).
    open: BTreeMap<HeldAt, OpenAlloc>,
    /// Kernel records metered.
    kernels: u64,
    /// Memory events accepted.
    memory_events: u64,
    /// Allocations at an address that was still held (the earlier one is closed there).
    reallocations: u64,
    /// Energy-counter samples: (ns since the epoch, cumulative mJ).
    energy: Vec<(u64, u64)>,
    /// Spans a recording observed the counter over ([`Meter::observe_energy_span`]).
    energy_spans: Vec<(u64, u64)>,
    /// PM samples waiting for the sweep, and what the report says of them
    /// ([`Meter::push_pm_sample`], `pm.rs`); boxed: the sweep's hot path only asks whether
    /// it holds samples, and the device's other fields stay as they were in memory.
    pm: Box<PmState>,
    /// Kernels with / without a warp-instruction count.
    kernels_with_instructions: u64,
    kernels_without_instructions: u64,
    /// Kernels with / without a count of each operation meter ([`crate::OP_METERS`] order).
    kernels_with_ops: [u64; 4],
    kernels_without_ops: [u64; 4],
    /// The operation counts of pending kernels that have some ([`Pending::ops`] is an index
    /// into it, plus one), kept only until the kernel starts, for the take-back of a kernel
    /// over [`MAX_RESIDENT_GRIDS`]: so a pending record stays small on the hot path. Freed
    /// entries are reused ([`DeviceState::op_free`]): no allocation in the steady state.
    op_slab: Vec<[Option<u64>; 4]>,
    op_free: Vec<u32>,
    /// Latest time seen on the device: record ends, memory and energy timestamps.
    last_ns: u64,
    /// Latest end of an accepted work record (0: none).
    work_end: u64,
    /// Kernels lost as over [`MAX_RESIDENT_GRIDS`] since the last drain: counted in
    /// [`RecordCounts::kernel`] at arrival, taken out of it when the report is built.
    kernels_over_limit: u64,
    /// The records the sweep starts at one instant (a reused buffer).
    starting: Vec<Pending>,
}

/// Accumulates activity records into usage per tenant, device, window and meter.
///
/// ```
/// use gpumeter_core::{ActivityRecord, DeviceInfo, KernelLaunch, Meter, MeterConfig, MeterKind, Work};
/// let mut meter = Meter::new(MeterConfig::default());
/// let mut gpu = DeviceInfo::bare("GPU-0", 0);
/// gpu.sm_count = Some(132);
/// let dev = meter.register_device(gpu);
/// let k = KernelLaunch { grid: Some([264, 1, 1]), ..KernelLaunch::default() };
/// meter.push(ActivityRecord::new(dev, 1_000, 2_000, Work::Kernel(k)));
/// let report = meter.finish().expect("report");
/// assert_eq!(report.device_total("GPU-0", MeterKind::SmNs), 132 * 1_000);
/// ```
#[derive(Debug)]
pub struct Meter {
    config: MeterConfig,
    tenant_map: TenantMap,
    devices: Vec<DeviceState>,
    device_index: HashMap<String, DeviceSlot>,
    keys: Vec<AttrKey>,
    key_index: HashMap<AttrKey, u32>,
    /// (external id, process id) → key with this meter's source tenant: the hot path's
    /// lookup, without building (and cloning the tenant of) an [`AttrKey`].
    own_keys: FxHashMap<(Option<u64>, Option<u32>), u32>,
    sources: Vec<SourceEntry>,
    source_tenant: Option<TenantName>,
    counts: RecordCounts,
    /// Records lost whose device could not be told, by (source label, reason).
    unplaced: BTreeMap<(String, LossReason), LossCount>,
    warnings: Vec<Warning>,
    seq: u64,
    /// Opening state of devices not registered yet, by device key.
    opening: HashMap<String, Vec<(HeldAt, OpenAlloc)>>,
    /// The device id an opening entry named, for devices registered only at the end.
    opening_ids: HashMap<String, u32>,
    /// What the reports this one continues metered ([`Meter::continue_from`]).
    earlier: Earlier,
    /// Records, memory events and PM samples not metered because an earlier report of the
    /// chain read them.
    before_earlier_end: (u64, u64, u64),
    /// How far this report read each recording, per device key ([`Meter::note_recording`]).
    recording_ends: BTreeMap<String, BTreeMap<String, u64>>,
    /// (device, window) cells made so far, against [`MeterConfig::max_cells`].
    budget: Arc<CellBudget>,
    /// Windows before this time (ns) were handed over by [`Meter::drain`]: every device's
    /// sweep starts here at the earliest, so a record that would touch them is `late`.
    drained_to: u64,
}

impl Meter {
    /// A meter with no devices and no records.
    pub fn new(config: MeterConfig) -> Self {
        let limit = config.max_cells;
        let source_tenant = config.tenant.clone();
        Meter {
            config,
            tenant_map: TenantMap::default(),
            devices: Vec::new(),
            device_index: HashMap::new(),
            keys: Vec::new(),
            key_index: HashMap::new(),
            own_keys: FxHashMap::default(),
            sources: Vec::new(),
            source_tenant,
            counts: RecordCounts::default(),
            unplaced: BTreeMap::new(),
            warnings: Vec::new(),
            seq: 0,
            opening: HashMap::new(),
            opening_ids: HashMap::new(),
            earlier: Earlier::default(),
            before_earlier_end: (0, 0, 0),
            recording_ends: BTreeMap::new(),
            budget: Arc::new(CellBudget {
                used: AtomicU64::new(0),
                limit,
            }),
            drained_to: 0,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &MeterConfig {
        &self.config
    }

    /// Replaces the tenant-map rules (applied when the report is built).
    pub fn set_tenant_map(&mut self, map: TenantMap) {
        self.tenant_map = map;
    }

    /// The tenant-map rules, to add or change rules one at a time (applied when the report is
    /// built).
    pub fn tenant_map_mut(&mut self) -> &mut TenantMap {
        &mut self.tenant_map
    }

    /// Announces a source. Returns `false`, and records a warning, when a source with the same
    /// SHA-256 was already metered: the caller must not push its records again: a source is metered once,
    /// however often it is given.
    pub fn begin_source(&mut self, source: SourceInfo) -> bool {
        if let Some(prev) = self.earlier.sources.get(&source.sha256) {
            self.warnings.push(Warning::new(
                WarningCode::DuplicateSource,
                format!(
                "source {} has the same SHA-256 as {prev}, which an earlier report of the chain \
                 (--opening) already metered: not metered again",
                source.name
            ),
            ));
            return false;
        }
        if let Some(prev) = self.sources.iter().find(|s| s.sha256 == source.sha256) {
            self.warnings.push(Warning::new(
                WarningCode::DuplicateSource,
                format!(
                    "source {} has the same SHA-256 as {} and was metered once",
                    source.name, prev.name
                ),
            ));
            return false;
        }
        self.sources.push(SourceEntry {
            name: source.name,
            format: source.format,
            sha256: source.sha256,
        });
        true
    }

    /// Records held in the reorder and duplicate buffers of every device: bounded by the
    /// records that arrive within one reordering horizon, not by the records metered.
    pub fn buffered_records(&self) -> usize {
        self.devices
            .iter()
            .map(|d| d.pending.len() + d.dups.0.len() + d.run.len())
            .sum()
    }

    /// Cells (device × window) held: bounded by devices × windows, not by records.
    pub fn cells(&self) -> usize {
        self.devices.iter().map(|d| d.cells.len()).sum()
    }

    /// The device registered under `slot`.
    pub fn device(&self, slot: DeviceSlot) -> Option<&DeviceInfo> {
        self.devices.get(slot.0 as usize).map(|d| &d.info)
    }

    /// Counts events that are not work, by category.
    pub fn record_skipped(&mut self, category: &str, count: u64) {
        *self.counts.skipped.entry(category.to_string()).or_insert(0) += count;
    }

    /// Counts records lost on a device for a reason (e.g. CUPTI dropped-record deltas, or a
    /// record an importer could not represent). Unknown slots are ignored.
    pub fn record_loss(&mut self, device: DeviceSlot, reason: LossReason, count: u64) {
        self.book_loss(device, reason, count, false);
    }

    /// Counts at least `count` records lost on a device for a reason, when the source cannot
    /// tell how many there were (a torn `.gmr` frame cut inside its buffer, say): the report's
    /// loss entry is marked `lower_bound` and its warning says "at least". Unknown slots are
    /// ignored.
    pub fn record_loss_at_least(&mut self, device: DeviceSlot, reason: LossReason, count: u64) {
        self.book_loss(device, reason, count, true);
    }

    fn book_loss(&mut self, device: DeviceSlot, reason: LossReason, count: u64, lower: bool) {
        if let Some(d) = self.devices.get_mut(device.0 as usize) {
            d.loss.entry(reason).or_default().add(count, lower);
        }
    }

    /// Counts records lost whose device the source does not tell (a record whose device id
    /// cannot be represented, a damaged `.gmr` frame with no readable record): the report lists
    /// them with `device: null` and `device_key` = `source` (the source's label, e.g.
    /// `309220b5c1d2e3f4`, [`crate::device::source_label`]), never on a device they may not belong to. `lower_bound` as for
    /// [`Meter::record_loss_at_least`].
    pub fn record_source_loss(
        &mut self,
        source: &str,
        reason: LossReason,
        count: u64,
        lower_bound: bool,
    ) {
        self.unplaced
            .entry((source.to_string(), reason))
            .or_default()
            .add(count, lower_bound);
    }

    /// Adds a warning (a code and a message for people) to the report.
    pub fn warn(&mut self, warning: Warning) {
        self.warnings.push(warning);
    }

    fn key_of(&mut self, rec: &ActivityRecord) -> u32 {
        self.own_key(rec.external_id, rec.process_id)
    }

    /// The key of (external id, process id) with this meter's source tenant.
    fn own_key(&mut self, external_id: Option<u64>, process_id: Option<u32>) -> u32 {
        if let Some(&i) = self.own_keys.get(&(external_id, process_id)) {
            return i;
        }
        let i = self.intern(AttrKey {
            external_id,
            process_id,
            source_tenant: self.source_tenant.clone(),
        });
        self.own_keys.insert((external_id, process_id), i);
        i
    }

    fn intern(&mut self, k: AttrKey) -> u32 {
        if let Some(&i) = self.key_index.get(&k) {
            return i;
        }
        let i = self.keys.len() as u32;
        self.keys.push(k.clone());
        self.key_index.insert(k, i);
        i
    }

    /// A copy of the meter's state with its own cell budget (the devices of one meter share
    /// one), for building a report: the duplicate tables are left empty ([`DupTable`]).
    fn deep_clone(&self) -> Meter {
        let budget = Arc::new(CellBudget {
            used: AtomicU64::new(self.budget.used()),
            limit: self.budget.limit,
        });
        let mut devices = self.devices.clone();
        for d in &mut devices {
            d.budget = Arc::clone(&budget);
        }
        Meter {
            config: self.config.clone(),
            tenant_map: self.tenant_map.clone(),
            devices,
            device_index: self.device_index.clone(),
            keys: self.keys.clone(),
            key_index: self.key_index.clone(),
            own_keys: self.own_keys.clone(),
            sources: self.sources.clone(),
            source_tenant: self.source_tenant.clone(),
            counts: self.counts.clone(),
            unplaced: self.unplaced.clone(),
            warnings: self.warnings.clone(),
            seq: self.seq,
            opening: self.opening.clone(),
            opening_ids: self.opening_ids.clone(),
            earlier: self.earlier.clone(),
            before_earlier_end: self.before_earlier_end,
            recording_ends: self.recording_ends.clone(),
            budget,
            drained_to: self.drained_to,
        }
    }

    /// The report [`Meter::finish`] would build now, leaving the meter as it is: records still
    /// inside the reordering horizon are booked in a copy, allocations still held are billed
    /// to the copy's end. A streaming meter (the C ABI's `gm_meter_usage_json`) answers "what
    /// so far" with it and goes on metering.
    ///
    /// The report says `"complete": false` ([`UsageReport::is_complete`]): usage events and
    /// finalization refuse it unless told to allow an incomplete report.
    ///
    /// Cost: a copy of the meter's state (the records within the horizon, the cells not yet
    /// drained), then [`Meter::finish`] on it.
    ///
    /// # Errors
    /// As [`Meter::finish`].
    pub fn snapshot(&self) -> Result<UsageReport, MeterError> {
        let mut report = self.deep_clone().finish()?;
        // A snapshot is never complete (docs/ARCHITECTURE.md, "Documents"): its last windows may still grow, so its
        // usage must not become final events or a finalized invoice.
        report.complete = Some(false);
        report.seal()?;
        Ok(report)
    }

    /// The time before which every device's records are booked, in ns since the epoch: the
    /// sweep of the device furthest behind (each device sweeps up to its latest record start
    /// minus [`MeterConfig::reorder_horizon_ns`]), or the last drain's edge if later; 0 before
    /// any record. A record starting before it is `late`, so [`Meter::drain`] with
    /// `before_ns` at or below it loses nothing that the reordering horizon would have kept.
    pub fn watermark_ns(&self) -> u64 {
        self.devices
            .iter()
            .filter(|d| d.started)
            .map(|d| d.swept_to)
            .min()
            .unwrap_or(0)
            .max(self.drained_to)
    }

    /// Moves the sweep of device `slot` on to `before_ns` when it is behind it and the device
    /// has work: everything before `before_ns` is booked and forgotten now, instead of when a
    /// record [`MeterConfig::reorder_horizon_ns`] later arrives. A source that pushes its items
    /// in time order (a whole file, sorted: `gpumeter_recording::meter_buffer_file`) calls it as it
    /// goes, promising that no work record starting before `before_ns` and no memory event
    /// before it will follow on that device, so the meter holds only the work running at
    /// `before_ns` rather than every record within the horizon (issue 13: memory flat in the
    /// input's size).
    ///
    /// It changes no quantity for such a source: the sweep books the same elementary
    /// intervals, only sooner. A work record or memory event pushed afterwards that starts
    /// before `before_ns` is `late`, as one older than the horizon is. Unknown slots and
    /// devices without a work record yet are left as they are, unless such a device holds PM
    /// samples ([`Meter::push_pm_sample`]): its sweep then starts at `before_ns`, so that the
    /// samples before it are apportioned (to [`crate::IDLE`]: no kernel ran there) and freed
    /// rather than held until the end (a device that is sampled but runs no kernel would
    /// otherwise hold every sample of a stream).
    pub fn settle(&mut self, slot: DeviceSlot, before_ns: u64) {
        let window = self.config.window;
        if let Some(d) = self.devices.get_mut(slot.0 as usize) {
            if (d.started || d.pm.has_held()) && before_ns > d.swept_to {
                d.started = true;
                d.advance(before_ns, window, &self.keys);
            }
        }
    }

    /// Sets the format of the last source announced as `name` (a stream's reports say
    /// whether they are a snapshot, [`STREAM_SNAPSHOT_FORMAT`], or a drained piece,
    /// [`STREAM_FORMAT`]). Returns `false` when no source has that name.
    pub fn set_source_format(&mut self, name: &str, format: &str) -> bool {
        match self.sources.iter_mut().rev().find(|s| s.name == name) {
            Some(s) => {
                s.format = format.to_string();
                true
            }
            None => false,
        }
    }
}

impl DeviceState {
    /// The error a bookkeeping fault of this device becomes.
    fn error(&self, fault: DeviceFault, window: WindowSize) -> MeterError {
        let (device, device_key) = (self.info.id, self.info.key.clone());
        match fault {
            DeviceFault::Overflow { meter, window: w } => MeterError::QuantityOverflow {
                device,
                device_key,
                meter,
                window_start: Some(rfc3339(w)),
            },
            DeviceFault::TooManyCells {
                what,
                from,
                to,
                windows,
            } => MeterError::TooManyCells {
                device,
                device_key,
                what,
                from: rfc3339_ns(from),
                to: rfc3339_ns(to),
                windows,
                window_seconds: window.seconds(),
                limit: self.budget.limit,
            },
        }
    }
}
