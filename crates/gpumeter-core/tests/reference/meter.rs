//! The meter as it was before issue 13's rewrite (commit e57b12a), kept verbatim but for its
//! public configuration, error and input types (taken from the production meter so both are
//! fed the same values): the reference that `meter_matches_reference` (src/meter) holds the
//! rewritten meter to, report for report. Compiled into the crate's unit tests only.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;

use num_bigint::BigInt;
use num_rational::BigRational;
use num_traits::{ToPrimitive, Zero};

use crate::device::DeviceInfo;
use crate::meter::{MeterConfig, MeterError, SourceInfo, TenantMap};
use crate::occupancy::{active_blocks_per_sm, LaunchConfig, Mode, WARP_SIZE};
use crate::record::{
    ActivityRecord, CopyDirection, DeviceSlot, Joined, LossReason, MemoryEvent, MemoryOp,
    PartitionId, Work,
};
use crate::report::{
    DeviceEntry, LossEntry, MeterKind, NotMeterable, OpenAllocation, Quantity, RecordCounts,
    SourceEntry, TotalRow, UsageReport, UsageRow, METERING_POLICY, USAGE_SCHEMA,
};
use crate::tenant::{TenantName, IDLE, UNATTRIBUTED};
use crate::time::{parse_rfc3339, rfc3339, rfc3339_ns, WindowSize, MAX_RECORD_NS};
use crate::warning::{NotMeterableCode, Warning, WarningCode};

/// A device's first fault in bookkeeping, turned into a [`MeterError`] by [`Meter::finish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeviceFault {
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
fn add_checked(
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
struct CellBudget {
    used: AtomicU64,
    limit: u64,
}

impl CellBudget {
    fn used(&self) -> u64 {
        self.used.load(AtomicOrdering::Relaxed)
    }
}

/// The cell of window `w`, made (and counted against the report's budget) when new; past the
/// budget the device keeps a fault ([`MeterError::TooManyCells`]).
fn cell_at<'c>(
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

/// A duplicate key (docs/METERING.md: the same record, equal in every field its source gives:
/// [`ActivityRecord::identity`]), after the start or timestamp that the sweep prunes by. The
/// records seen under one key keep their joined facts, and a new record is a duplicate when
/// its facts agree with one of them ([`Joined::agrees`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Dup {
    Work(ActivityRecord),
    Memory(MemoryEvent),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct AttrKey {
    external_id: Option<u64>,
    process_id: Option<u32>,
    source_tenant: Option<TenantName>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Pending {
    start: u64,
    seq: u64,
    end: u64,
    key: u32,
    /// SMs held (0 for non-kernels or when the SM count or grid is unknown).
    held: u32,
    /// Resident warps per SM (0 for non-kernels or when they cannot be computed).
    warps: u32,
    /// Partition (green context) index + 1; 0 = the device itself.
    part: u32,
    /// A kernel (counted in the report that meters it when a drain finds it buffered).
    kernel: bool,
}

#[derive(Debug, Clone, Copy)]
struct Active {
    end: u64,
    key: u32,
    held: u32,
    warps: u32,
    part: u32,
    /// When it started, and whether it is a kernel (for a drain's count of kernels the
    /// production meter still holds back: those starting at the sweep's edge).
    start: u64,
    kernel: bool,
}

/// A memory event waiting for the sweep, ordered by (timestamp, arrival).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct MemPending {
    ts: u64,
    seq: u64,
    /// Process id: addresses are per process (virtual address spaces).
    pid: Option<u32>,
    address: u64,
    bytes: u64,
    /// 0 allocation, 1 release, 2 process exit.
    op: u8,
    key: u32,
    /// When the allocation was first made (differs from `ts` for opening state).
    allocated_at: u64,
}

/// An allocation held, billed up to `since` so far.
#[derive(Debug, Clone, Copy)]
struct OpenAlloc {
    since: u64,
    allocated_at: u64,
    bytes: u64,
    key: u32,
}

/// A capped share factor `num / den` (reduced), applied to Σ len·held.
type Factor = (u128, u128);

/// Where an allocation is held: (process id, virtual address).
type HeldAt = (Option<u32>, u64);

/// (start or timestamp, the record): the record's every field (docs/METERING.md), ordered by time
/// so that the sweep can forget what it has passed.
type DupKey = (u64, Dup);

#[derive(Debug, Default, Clone)]
struct Cell {
    /// Integer meters per (key, meter): counts, bytes, kernel_ns.
    ints: HashMap<(u32, MeterKind), u128>,
    /// Busy ns per sorted set of keys running.
    busy: HashMap<Vec<u32>, u128>,
    /// Uncapped SM·ns per key.
    sm_exact: HashMap<u32, u128>,
    /// Capped SM·ns per key: Σ len·held per distinct cap factor `num / den`; share = value ×
    /// num / den.
    sm_capped: HashMap<u32, BTreeMap<Factor, u128>>,
    /// Uncapped warp·ns per key: Σ len·held·warps.
    warp_exact: HashMap<u32, u128>,
    /// Capped warp·ns per key: Σ len·held·warps per distinct cap factor; share = value × num /
    /// den.
    warp_capped: HashMap<u32, BTreeMap<Factor, u128>>,
}

/// What the running work holds: sorted distinct attribution keys, and per (key, cap factor)
/// Σ SMs held and Σ held × resident warps (non-zero only). The factor is `None` when nothing
/// is capped, else the reduced `num / den` by which the partition cap and then the device cap
/// scale the SMs held (docs/METERING.md, "The meters" (the SM cap)).
#[derive(Debug, Clone)]
struct ActiveSummary {
    keys: Vec<u32>,
    held: Vec<(u32, Option<Factor>, u64, u128)>,
}

#[derive(Debug, Clone)]
struct DeviceState {
    info: DeviceInfo,
    /// Every description of the device with the SHA-256 of the source that gave it.
    descriptions: Vec<(String, DeviceInfo)>,
    pending: BinaryHeap<Reverse<Pending>>,
    active: Vec<Active>,
    /// Sweep position: everything before it is booked; a record starting before it is late.
    swept_to: u64,
    started: bool,
    max_start: u64,
    dups: BTreeMap<DupKey, Vec<Joined>>,
    cells: BTreeMap<u64, Cell>,
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
    /// Cached summary of the active set, rebuilt when the set changes.
    summary: Option<ActiveSummary>,
    /// SMs of each partition (green context), index = [`PartitionId`].
    partitions: Vec<u32>,
    /// Memory events waiting for the sweep.
    mem_pending: BinaryHeap<Reverse<MemPending>>,
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
    /// Kernels with / without a warp-instruction count.
    kernels_with_instructions: u64,
    kernels_without_instructions: u64,
    /// Latest time seen on the device: record ends, memory and energy timestamps.
    last_ns: u64,
    /// Latest end of an accepted work record (0: none).
    work_end: u64,
}

/// The reference meter.
#[derive(Debug)]
pub struct Meter {
    config: MeterConfig,
    tenant_map: TenantMap,
    devices: Vec<DeviceState>,
    device_index: HashMap<String, DeviceSlot>,
    keys: Vec<AttrKey>,
    key_index: HashMap<AttrKey, u32>,
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
    /// Records and memory events not metered because an earlier report of the chain read them.
    before_earlier_end: (u64, u64),
    /// How far this report read each recording, per device key ([`Meter::note_recording`]).
    recording_ends: BTreeMap<String, BTreeMap<String, u64>>,
    /// (device, window) cells made so far, against [`MeterConfig::max_cells`].
    budget: Arc<CellBudget>,
    /// Windows before this time (ns) were handed over by [`Meter::drain`]: every device's
    /// sweep starts here at the earliest, so a record that would touch them is `late`.
    drained_to: u64,
}

/// What the reports continued by [`Meter::continue_from`] had already metered.
#[derive(Debug, Clone, Default)]
struct Earlier {
    /// SHA-256 → file name of every source of the chain.
    sources: BTreeMap<String, String>,
    /// Per recording, per device key, how far the chain read it.
    recordings: BTreeMap<String, BTreeMap<String, u64>>,
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
            sources: Vec::new(),
            source_tenant,
            counts: RecordCounts::default(),
            unplaced: BTreeMap::new(),
            warnings: Vec::new(),
            seq: 0,
            opening: HashMap::new(),
            opening_ids: HashMap::new(),
            earlier: Earlier::default(),
            before_earlier_end: (0, 0),
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
    /// SHA-256 was already metered: the caller must not push its records again (docs/ARCHITECTURE.md,
    /// "Invariants").
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

    /// Registers a device, or fills the unknown fields of the device already registered under
    /// the same key. Returns its slot for [`ActivityRecord::device`].
    pub fn register_device(&mut self, info: DeviceInfo) -> DeviceSlot {
        // Descriptions are ranked by the SHA-256 of the source announcing them (the last
        // [`Meter::begin_source`]), so the result never depends on the order of the inputs.
        let rank = self
            .sources
            .last()
            .map(|s| s.sha256.clone())
            .unwrap_or_default();
        if let Some(&slot) = self.device_index.get(&info.key) {
            let d = &mut self.devices[slot.0 as usize];
            let known = &d.info;
            let name_differs = matches!((&known.name, &info.name), (Some(a), Some(b)) if a != b);
            let sms_differ =
                matches!((known.sm_count, info.sm_count), (Some(a), Some(b)) if a != b);
            if name_differs || sms_differ {
                self.warnings.push(Warning::new(
                    WarningCode::DeviceDescribedTwice,
                    format!(
                    "device {} is described twice with different facts ({:?}, {:?} SMs vs {:?}, \
                     {:?} SMs); where they differ, the description of the source whose SHA-256 \
                     sorts first is kept",
                    info.key, known.name, known.sm_count, info.name, info.sm_count
                ),
                ));
            }
            // Every description, field by field, in source-SHA order: the first that knows a
            // field gives it.
            d.descriptions.push((rank, info));
            d.descriptions.sort_by(|a, b| a.0.cmp(&b.0));
            let mut merged = d.descriptions[0].1.clone();
            for (_, other) in &d.descriptions[1..] {
                merged.fill_from(other);
            }
            merged.key = d.info.key.clone();
            d.info = merged;
            return slot;
        }
        let descriptions = vec![(rank, info.clone())];
        let slot = DeviceSlot(self.devices.len() as u32);
        self.device_index.insert(info.key.clone(), slot);
        self.devices.push(DeviceState {
            info,
            descriptions,
            pending: BinaryHeap::new(),
            active: Vec::new(),
            // After a drain the handed-over windows are closed on new devices too.
            swept_to: self.drained_to,
            started: self.drained_to > 0,
            max_start: 0,
            dups: BTreeMap::new(),
            cells: BTreeMap::new(),
            loss: BTreeMap::new(),
            fault: None,
            budget: Arc::clone(&self.budget),
            records: 0,
            kernels_without_grid: 0,
            kernels_without_occupancy: 0,
            summary: None,
            partitions: Vec::new(),
            mem_pending: BinaryHeap::new(),
            open: BTreeMap::new(),
            kernels: 0,
            memory_events: 0,
            reallocations: 0,
            energy: Vec::new(),
            energy_spans: Vec::new(),
            kernels_with_instructions: 0,
            kernels_without_instructions: 0,
            last_ns: 0,
            work_end: 0,
        });
        if let Some(held) = self.opening.remove(&self.devices[slot.0 as usize].info.key) {
            let d = &mut self.devices[slot.0 as usize];
            for (key, a) in held {
                d.last_ns = d.last_ns.max(a.since);
                d.memory_events += 1;
                d.open.insert(key, a);
            }
        }
        slot
    }

    /// Declares a partition of a device's SMs: a green context (CUPTI CONTEXT record with
    /// `isGreenContext` and `numMultiprocessors`). Records whose [`ActivityRecord::partition`]
    /// is the returned id hold at most `sm_count` SMs and are capped to it before the device
    /// cap (docs/METERING.md, "The meters" (sm_ns, the SM cap)). The source maps its own context ids to partitions
    /// (context ids are per process). A MIG instance needs no partition: CUDA presents it as a
    /// device of its own (key `MIG-<uuid>`) whose SM count is the instance's. `None` for an
    /// unknown slot or an `sm_count` of 0.
    pub fn register_partition(&mut self, device: DeviceSlot, sm_count: u32) -> Option<PartitionId> {
        let d = self.devices.get_mut(device.0 as usize)?;
        if sm_count == 0 {
            return None;
        }
        d.partitions.push(sm_count);
        Some(PartitionId(d.partitions.len() as u32 - 1))
    }

    /// Overrides fields of a registered device (a device catalog entry, docs/METERING.md, "Common rules"): every field
    /// `Some` in `over` replaces the device's. Returns `false` when no device has that key.
    pub fn override_device(&mut self, key: &str, over: &DeviceInfo) -> bool {
        let Some(&slot) = self.device_index.get(key) else {
            return false;
        };
        let d = &mut self.devices[slot.0 as usize].info;
        let mut merged = over.clone();
        merged.key = d.key.clone();
        merged.id = d.id;
        merged.fill_from(d);
        *d = merged;
        true
    }

    /// Fills the fields the device registered under `slot` does not know from `other` (a copy
    /// of its work from another source knew them); known fields stay, the key stays. Unknown
    /// slots are ignored.
    pub fn fill_device(&mut self, slot: DeviceSlot, other: &DeviceInfo) {
        if let Some(d) = self.devices.get_mut(slot.0 as usize) {
            d.info.fill_from(other);
        }
    }

    /// Records held in the reorder and duplicate buffers of every device: bounded by the
    /// records that arrive within one reordering horizon, not by the records metered.
    pub fn buffered_records(&self) -> usize {
        self.devices
            .iter()
            .map(|d| d.pending.len() + d.dups.len() + d.active.len())
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

    /// Counts events that are not work (docs/METERING.md, "Common rules"), by category.
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
    /// `trace.json@309220b5`), never on a device they may not belong to. `lower_bound` as for
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
        let k = AttrKey {
            external_id: rec.external_id,
            process_id: rec.process_id,
            source_tenant: self.source_tenant.clone(),
        };
        self.intern(k)
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

    /// Meters one record. Invalid records (a zero timestamp, end before start, over 7 days,
    /// older than the reordering horizon, duplicates) are counted as loss and feed no meter.
    /// Records for an unregistered slot are ignored.
    pub fn push(&mut self, rec: ActivityRecord) {
        let Some(dev) = self.devices.get(rec.device.0 as usize) else {
            return;
        };
        let reason = if rec.start_ns == 0 || rec.end_ns == 0 {
            Some(LossReason::ZeroTimestamp)
        } else if rec.end_ns < rec.start_ns {
            Some(LossReason::EndBeforeStart)
        } else if rec.end_ns - rec.start_ns > MAX_RECORD_NS {
            Some(LossReason::TooLong)
        } else if dev.started && rec.start_ns < dev.swept_to {
            Some(LossReason::Late)
        } else {
            None
        };
        if let Some(r) = reason {
            self.record_loss(rec.device, r, 1);
            return;
        }
        let dup: DupKey = (rec.start_ns, Dup::Work(rec.identity()));
        let joined = rec.joined();
        let key = self.key_of(&rec);
        let window = self.config.window;
        let dev = &mut self.devices[rec.device.0 as usize];
        if !dev.first_of(dup, joined) {
            dev.loss
                .entry(LossReason::Duplicate)
                .or_default()
                .add(1, false);
            return;
        }
        dev.records += 1;
        dev.last_ns = dev.last_ns.max(rec.end_ns);
        dev.work_end = dev.work_end.max(rec.end_ns);
        // Pending/Active carry partition index + 1; 0 = the device (also for an id that is not
        // this device's).
        let part = rec
            .partition
            .map(|p| p.0)
            .filter(|&p| (p as usize) < dev.partitions.len())
            .map_or(0, |p| p + 1);
        // SMs of the kernel's partition: its green context's when set, else the device's.
        let sm_count = match part {
            0 => dev.info.sm_count,
            p => dev
                .info
                .sm_count
                .map(|n| n.min(dev.partitions[(p - 1) as usize])),
        };
        let mut held = 0u32;
        let mut warps = 0u32;
        let w0 = window.start_of(rec.start_ns);
        let start_cell = cell_at(&mut dev.cells, &dev.budget, &mut dev.fault, w0, window);
        let fault = &mut dev.fault;
        let mut add = |cell: &mut Cell, m: MeterKind, v: u128| {
            add_checked(cell.ints.entry((key, m)).or_insert(0), v, fault, m, w0);
        };
        match &rec.work {
            Work::Kernel(k) => {
                self.counts.kernel += 1;
                dev.kernels += 1;
                add(start_cell, MeterKind::KernelLaunches, 1);
                if let Some(n) = k.warp_instructions {
                    dev.kernels_with_instructions += 1;
                    add(start_cell, MeterKind::WarpInstructions, u128::from(n));
                } else {
                    dev.kernels_without_instructions += 1;
                }
                match (sm_count, k.blocks()) {
                    (Some(n), Some(blocks)) => held = blocks.min(u64::from(n)) as u32,
                    (_, None) => dev.kernels_without_grid += 1,
                    (None, Some(_)) => {}
                }
                match resident_warps(&dev.info, k, held) {
                    Some(w) => warps = w,
                    None => dev.kernels_without_occupancy += 1,
                }
                // kernel_ns: split by time at window edges.
                let mut t = rec.start_ns;
                while t < rec.end_ns {
                    let w = window.start_of(t);
                    let edge = w.saturating_add(window.ns()).min(rec.end_ns);
                    let q = cell_at(&mut dev.cells, &dev.budget, &mut dev.fault, w, window)
                        .ints
                        .entry((key, MeterKind::KernelNs))
                        .or_insert(0);
                    add_checked(
                        q,
                        u128::from(edge - t),
                        &mut dev.fault,
                        MeterKind::KernelNs,
                        w,
                    );
                    t = edge;
                }
            }
            Work::Memcpy { bytes, direction } => {
                self.counts.memcpy += 1;
                let m = match direction {
                    CopyDirection::HostToDevice => MeterKind::MemcpyHtodBytes,
                    CopyDirection::DeviceToHost => MeterKind::MemcpyDtohBytes,
                    CopyDirection::DeviceToDevice => MeterKind::MemcpyDtodBytes,
                    CopyDirection::Peer => MeterKind::MemcpyPeerBytes,
                    CopyDirection::Other => MeterKind::MemcpyOtherBytes,
                };
                add(start_cell, m, u128::from(*bytes));
            }
            Work::Memset { bytes } => {
                self.counts.memset += 1;
                add(start_cell, MeterKind::MemsetBytes, u128::from(*bytes));
            }
            Work::GraphLaunch => {}
        }
        self.seq += 1;
        dev.pending.push(Reverse(Pending {
            start: rec.start_ns,
            seq: self.seq,
            end: rec.end_ns,
            key,
            held,
            warps,
            part,
            kernel: matches!(rec.work, Work::Kernel(_)),
        }));
        dev.note_start(rec.start_ns, self.config.reorder_horizon_ns, window);
    }

    /// Meters one memory allocation or release (`memory_byte_ns`, docs/METERING.md). Events are
    /// paired by device and address in timestamp order (arrival order for equal timestamps)
    /// within the reordering horizon. A release without an allocation is loss
    /// (`release_without_allocation`); an allocation at an address still held closes the
    /// earlier allocation there (counted in a warning). A zero timestamp is loss
    /// (`zero_timestamp`), an event older than the horizon `late`, the same event twice
    /// (device, context, correlation id, address, timestamp, operation) `duplicate`.
    /// Allocations still held when the report is built are billed to the report's end and
    /// listed in `open_allocations`. Unknown slots are ignored.
    pub fn push_memory(&mut self, ev: MemoryEvent) {
        self.push_memory_at(ev);
    }

    /// Takes the allocations an earlier report left open as opening state (`--opening`,
    /// docs/METERING.md, "Edge cases" (memory)): each is held from that report's `billed_to` on, on the device with
    /// its `device_key` (registered now if no input names it by [`Meter::finish`]), paired with
    /// a later release by process id and address, attributed by its external id and process id
    /// through this meter's tenant map first, then to the tenant the earlier report gave it.
    /// Call it before pushing records: opening state is not subject to the reordering horizon.
    ///
    /// # Errors
    /// A message naming the entry (`open_allocations[i]`) and field, and nothing is taken, when
    /// an address, time or byte count cannot be read, `billed_to` is 0 or before
    /// `allocated_at`, the tenant is empty, or two entries hold the same address of one
    /// process on one device.
    pub fn set_opening(&mut self, entries: &[OpenAllocation]) -> Result<(), String> {
        // (device key, device id, where held, bytes, billed_to, allocated_at, attribution)
        type Entry = (String, u32, HeldAt, u64, u64, u64, AttrKey);
        let mut parsed: Vec<Entry> = Vec::with_capacity(entries.len());
        let mut seen = BTreeSet::new();
        for (i, open) in entries.iter().enumerate() {
            let at = |field: &str, e: String| format!("open_allocations[{i}].{field}: {e}");
            let address = parse_address(&open.address).map_err(|e| at("address", e))?;
            let billed_to = parse_rfc3339(&open.billed_to).map_err(|e| at("billed_to", e))?;
            let allocated_at =
                parse_rfc3339(&open.allocated_at).map_err(|e| at("allocated_at", e))?;
            if billed_to == 0 {
                return Err(at(
                    "billed_to",
                    "the Unix epoch is not a report's end".into(),
                ));
            }
            if allocated_at > billed_to {
                return Err(at(
                    "allocated_at",
                    format!(
                        "{} is after billed_to {}",
                        open.allocated_at, open.billed_to
                    ),
                ));
            }
            let bytes = u64::try_from(open.bytes.0)
                .map_err(|_| at("bytes", format!("{} exceeds 64 bits", open.bytes.0)))?;
            // `unattributed` is what a meter writes itself for memory no rule attributed; any
            // other name must be a tenant name (`idle` never holds memory).
            let tenant = if open.tenant == UNATTRIBUTED {
                None
            } else {
                Some(
                    TenantName::parse(&open.tenant)
                        .map_err(|e| at("tenant", format!("{:?}: {e}", open.tenant)))?,
                )
            };
            if open.device_key.trim().is_empty() {
                return Err(at("device_key", "empty".into()));
            }
            let key = (open.process_id, address);
            if !seen.insert((open.device_key.clone(), key)) {
                return Err(at(
                    "address",
                    format!(
                        "{} of process {:?} on {} is held by an earlier entry too",
                        open.address, open.process_id, open.device_key
                    ),
                ));
            }
            let attr = AttrKey {
                external_id: open.external_id,
                process_id: open.process_id,
                source_tenant: tenant,
            };
            parsed.push((
                open.device_key.clone(),
                open.device,
                key,
                bytes,
                billed_to,
                allocated_at,
                attr,
            ));
        }
        for (device_key, id, key, bytes, billed_to, allocated_at, attr) in parsed {
            let k = self.intern(attr);
            let a = OpenAlloc {
                since: billed_to,
                allocated_at,
                bytes,
                key: k,
            };
            if let Some(&slot) = self.device_index.get(&device_key) {
                let d = &mut self.devices[slot.0 as usize];
                d.last_ns = d.last_ns.max(billed_to);
                d.memory_events += 1;
                d.open.insert(key, a);
            } else {
                self.opening_ids.entry(device_key.clone()).or_insert(id);
                self.opening.entry(device_key).or_default().push((key, a));
            }
        }
        Ok(())
    }

    /// Continues an earlier report (`--opening`, docs/METERING.md, "Edge cases" (memory)): takes its
    /// `open_allocations` as opening state ([`Meter::set_opening`]) and, so that nothing the
    /// chain of reports metered is metered again, remembers
    ///
    /// * the SHA-256 of its sources and of the sources of the reports it continued
    ///   (`extensions.earlier_sources`): an input with one of them is not metered again
    ///   ([`Meter::begin_source`] returns `false`, with a warning);
    /// * how far the chain read each `.gmr` recording, per device (`extensions.recordings`):
    ///   what the same recording holds at or before that time (a recording that grew since,
    ///   given again) is not metered again ([`Meter::recording_read_to`]; `push_batches`
    ///   leaves it out and counts it as skipped `billed_by_opening_report`).
    ///
    /// Both are carried into this report's `extensions`, so a chain stays protected across a
    /// day on which a GPU or a recording is idle. Call it before announcing sources.
    ///
    /// # Errors
    /// As [`Meter::set_opening`], and a message naming `extensions.recordings[i]` when a time
    /// is not an RFC 3339 time.
    pub fn continue_from(&mut self, report: &UsageReport) -> Result<(), String> {
        let mut recordings: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        for (i, r) in report.extensions.recordings.iter().enumerate() {
            for (j, e) in r.device_ends.iter().enumerate() {
                let t = parse_rfc3339(&e.end).map_err(|why| {
                    format!("extensions.recordings[{i}].device_ends[{j}].end: {why}")
                })?;
                let v = recordings
                    .entry(r.recording.clone())
                    .or_default()
                    .entry(e.device_key.clone())
                    .or_insert(t);
                *v = (*v).max(t);
            }
        }
        self.set_opening(&report.open_allocations)?;
        for s in &report.sources {
            self.earlier
                .sources
                .insert(s.sha256.clone(), s.name.clone());
        }
        for sha in &report.extensions.earlier_sources {
            self.earlier
                .sources
                .entry(sha.clone())
                .or_insert_with(|| "a source of an earlier report".to_string());
        }
        for (rec, ends) in recordings {
            let mine = self.earlier.recordings.entry(rec).or_default();
            for (k, t) in ends {
                let v = mine.entry(k).or_insert(t);
                *v = (*v).max(t);
            }
        }
        Ok(())
    }

    /// How far the reports this one continues read `recording` on `device`: what the recording
    /// holds there at or before this time was metered by them ([`Meter::continue_from`]).
    pub fn recording_read_to(&self, recording: &str, device: DeviceSlot) -> Option<u64> {
        let d = self.devices.get(device.0 as usize)?;
        self.earlier
            .recordings
            .get(recording)?
            .get(&d.info.key)
            .copied()
    }

    /// Notes that this report read `recording` on `device` up to `end` (the latest time of
    /// anything it holds there), for the report's `extensions.recordings`.
    pub fn note_recording(&mut self, recording: &str, device: DeviceSlot, end: u64) {
        let Some(d) = self.devices.get(device.0 as usize) else {
            return;
        };
        let v = self
            .recording_ends
            .entry(recording.to_string())
            .or_default()
            .entry(d.info.key.clone())
            .or_insert(end);
        *v = (*v).max(end);
    }

    /// Counts work records and memory events left out because an earlier report of the chain
    /// metered them ([`Meter::recording_read_to`]).
    pub fn record_billed_earlier(&mut self, records: u64, memory_events: u64) {
        self.before_earlier_end.0 += records;
        self.before_earlier_end.1 += memory_events;
    }

    fn push_memory_at(&mut self, ev: MemoryEvent) {
        let Some(dev) = self.devices.get(ev.device.0 as usize) else {
            return;
        };
        let reason = if ev.timestamp_ns == 0 {
            Some(LossReason::ZeroTimestamp)
        } else if dev.started && ev.timestamp_ns < dev.swept_to {
            Some(LossReason::Late)
        } else {
            None
        };
        if let Some(r) = reason {
            self.record_loss(ev.device, r, 1);
            return;
        }
        let op = match ev.op {
            MemoryOp::Allocation => 0,
            MemoryOp::Release => 1,
            MemoryOp::ProcessExit => 2,
        };
        let dup: DupKey = (ev.timestamp_ns, Dup::Memory(ev.identity()));
        let joined = ev.joined();
        let k = AttrKey {
            external_id: ev.external_id,
            process_id: ev.process_id,
            source_tenant: self.source_tenant.clone(),
        };
        let (key, allocated_at) = (self.intern(k), ev.timestamp_ns);
        let window = self.config.window;
        let dev = &mut self.devices[ev.device.0 as usize];
        if !dev.first_of(dup, joined) {
            dev.loss
                .entry(LossReason::Duplicate)
                .or_default()
                .add(1, false);
            return;
        }
        dev.memory_events += 1;
        dev.last_ns = dev.last_ns.max(ev.timestamp_ns);
        self.seq += 1;
        dev.mem_pending.push(Reverse(MemPending {
            ts: ev.timestamp_ns,
            seq: self.seq,
            pid: ev.process_id,
            address: ev.address,
            bytes: ev.bytes,
            op,
            key,
            allocated_at,
        }));
        dev.note_start(ev.timestamp_ns, self.config.reorder_horizon_ns, window);
    }

    /// Declares that one recording observed the device's energy counter from `from_ns` to
    /// `to_ns` (its first and last sample). Once a device has spans, energy is interpolated
    /// only between samples that one span covers: the gap between two recordings of the GPU
    /// made one after the other was observed by none and is not billed (the report warns).
    /// Unknown slots are ignored.
    pub fn observe_energy_span(&mut self, device: DeviceSlot, from_ns: u64, to_ns: u64) {
        if let Some(d) = self.devices.get_mut(device.0 as usize) {
            d.energy_spans
                .push((from_ns.min(to_ns), from_ns.max(to_ns)));
        }
    }

    /// Records a sample of a device's cumulative energy counter (`energy_mj`, docs/METERING.md): NVML
    /// `nvmlDeviceGetTotalEnergyConsumption`, mJ, at `timestamp_ns` (ns since the epoch,
    /// CUPTI's clock). The counter is interpolated linearly between samples to window edges;
    /// a window's energy is apportioned to tenants by their `sm_ns` in it, or to the tenant
    /// [`IDLE`] when it has none. Energy before the first and after the last sample is unknown
    /// and not billed; a counter that goes down (driver reload) ends one run of samples and
    /// starts another (the gap is not billed, and the report says so). Samples may arrive in
    /// any order; they are kept until the report is built. Unknown slots and zero timestamps
    /// are ignored.
    pub fn push_energy(&mut self, device: DeviceSlot, timestamp_ns: u64, energy_mj: u64) {
        if timestamp_ns == 0 {
            return;
        }
        if let Some(d) = self.devices.get_mut(device.0 as usize) {
            d.energy.push((timestamp_ns, energy_mj));
            d.last_ns = d.last_ns.max(timestamp_ns);
        }
    }

    /// A copy of the meter's whole state with its own cell budget (the devices of one meter
    /// share one).
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
    /// Cost: a copy of the meter's state (the records within the horizon, the cells not yet
    /// drained), then [`Meter::finish`] on it.
    ///
    /// # Errors
    /// As [`Meter::finish`].
    pub fn snapshot(&self) -> Result<UsageReport, MeterError> {
        let mut report = self.deep_clone().finish()?;
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

    /// Hands over and forgets the windows that end at or before `before_ns` (docs/C_ABI.md): the
    /// returned report holds their usage; the meter keeps the later windows, the records
    /// still inside the reordering horizon and the allocations still held.
    ///
    /// Windows are those of [`MeterConfig::window`]; the edge is `before_ns` rounded down to a
    /// window boundary. What the drain does, in order:
    /// - every device's sweep moves to the edge (at least): the records buffered before it are
    ///   booked, and from now on a record starting before it — on any device, also one
    ///   registered later — is loss `late` (it would change a window already handed over);
    /// - allocations still held are billed up to the edge (they are held at least that long:
    ///   a release before it would now be late) and stay held from there; with `before_ns =
    ///   u64::MAX` (everything: the meter's end) up to the report's end, as [`Meter::finish`]
    ///   bills them;
    /// - the report is built from the windows before the edge, with the loss, skipped counts,
    ///   record counts and warnings gathered since the last drain, which the meter then
    ///   forgets; a device's meterability (`not_meterable`) is not forgotten.
    ///
    /// So the drained reports of a meter and its final report sum, row by row, to the report
    /// the meter would have built without draining (when no record arrives late because of a
    /// drain, and no allocation is still held past the latest work at a drain: such memory
    /// is billed up to the drain's edge, which an undrained report does not know of), and no
    /// quantity is handed over twice. The report has no `open_allocations`
    /// (the meter still holds them), except the drain of everything (`u64::MAX`), which lists
    /// them as [`Meter::finish`] does (billed to the report's end) and forgets them: the next
    /// report takes them as opening state. Drained windows free their cells in the
    /// [`MeterConfig::max_cells`] budget.
    ///
    /// # Errors
    /// [`MeterError::DrainWithEnergy`] when the meter holds energy samples (energy is
    /// apportioned over whole runs of samples and cannot be drained yet); otherwise as
    /// [`Meter::finish`]. On an error the meter is left exactly as it was (nothing handed
    /// over, forgotten or moved).
    pub fn drain(&mut self, before_ns: u64) -> Result<UsageReport, MeterError> {
        if self.devices.iter().any(|d| !d.energy.is_empty()) {
            return Err(MeterError::DrainWithEnergy);
        }
        // A drain that fails (memory held up to an edge past the cell budget, a quantity past
        // 128 bits) leaves the meter exactly as it was: usable, nothing moved.
        let before = self.deep_clone();
        match self.drain_now(before_ns) {
            Ok(report) => Ok(report),
            Err(e) => {
                *self = before;
                Err(e)
            }
        }
    }

    /// [`Meter::drain`]'s work; on an error the meter is half-changed (the caller restores it).
    fn drain_now(&mut self, before_ns: u64) -> Result<UsageReport, MeterError> {
        let window = self.config.window;
        let end = before_ns == u64::MAX;
        let edge = window.start_of(before_ns);
        for d in &mut self.devices {
            if !d.started || d.swept_to < edge {
                d.started = true;
                d.advance(edge, window);
            }
        }
        self.drained_to = self.drained_to.max(edge);
        // Memory held across the edge is held up to it: no release before the edge can be
        // accepted any more (it would be late), and the windows before it are handed over
        // now, so a later release must not book into them. Draining everything
        // (`u64::MAX`) is the end: held memory is billed to the report's end as `finish`
        // bills it, and nothing can follow (every later record is late).
        let bill_to = if end {
            match self.devices.iter().map(|d| d.work_end).max() {
                Some(w) if w > 0 => w,
                _ => self.devices.iter().map(|d| d.last_ns).max().unwrap_or(0),
            }
        } else {
            edge
        };
        for d in &mut self.devices {
            let held: Vec<HeldAt> = d
                .open
                .iter()
                .filter(|(_, a)| a.since < bill_to)
                .map(|(k, _)| *k)
                .collect();
            for k in held {
                if let Some(a) = d.open.get(&k).copied() {
                    if d.hold(a, bill_to, window) {
                        if let Some(open) = d.open.get_mut(&k) {
                            open.since = bill_to;
                        }
                    }
                }
            }
        }
        // The handed-over part: the windows before the edge and what was gathered since the
        // last drain, nothing buffered; at the end (`u64::MAX`) the allocations still held,
        // listed in `open_allocations` for the next report's opening state.
        // Kernels not yet started are counted in the next report, the one that meters them
        // (the production meter also holds back the kernels starting at the sweep's edge,
        // which more kernels of that instant may still join).
        let carried: Vec<u64> = self
            .devices
            .iter()
            .map(|d| {
                let pending = d.pending.iter().filter(|p| p.0.kernel).count();
                let at_edge = d
                    .active
                    .iter()
                    .filter(|a| a.kernel && a.start == d.swept_to)
                    .count();
                (pending + at_edge) as u64
            })
            .collect();
        let carried_total: u64 = carried.iter().sum();
        let mut part = self.deep_clone();
        part.counts.kernel -= carried_total;
        for (d, &c) in part.devices.iter_mut().zip(&carried) {
            d.records -= c;
            d.kernels -= c;
            let later = d.cells.split_off(&edge);
            drop(later);
            d.pending.clear();
            d.active.clear();
            d.summary = None;
            d.mem_pending.clear();
            if !end {
                d.open.clear();
            }
            d.dups.clear();
        }
        part.opening.clear();
        let report = part.finish()?;
        // Forget what was handed over.
        let mut freed = 0u64;
        for (d, &c) in self.devices.iter_mut().zip(&carried) {
            let later = d.cells.split_off(&edge);
            freed += d.cells.len() as u64;
            d.cells = later;
            d.loss.clear();
            d.records = c;
            d.kernels = c;
            d.memory_events = 0;
            d.reallocations = 0;
            if end {
                d.open.clear();
            }
        }
        self.budget
            .used
            .fetch_sub(freed.min(self.budget.used()), AtomicOrdering::Relaxed);
        self.counts = RecordCounts {
            kernel: carried_total,
            ..RecordCounts::default()
        };
        self.unplaced.clear();
        self.warnings.clear();
        Ok(report)
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

    /// Books everything still buffered and builds the report, digest included.
    ///
    /// Allocations still held are billed to the report's end (the latest end of accepted work
    /// on any device; without work, the latest memory, energy or opening time) and listed in
    /// `open_allocations`, with a warning.
    ///
    /// # Errors
    /// [`MeterError::QuantityOverflow`] when a quantity exceeds `u128::MAX` (never clamped);
    /// [`MeterError::TooManyCells`] when memory held, energy samples or work would take the
    /// report past [`MeterConfig::max_cells`] cells; [`MeterError::Digest`] when the report
    /// cannot be serialized for its digest.
    pub fn finish(mut self) -> Result<UsageReport, MeterError> {
        let window = self.config.window;
        // Opening state of devices no input named: on a device entry of its own.
        let mut leftover: Vec<String> = self.opening.keys().cloned().collect();
        leftover.sort();
        for key in leftover {
            let id = self.opening_ids.get(&key).copied().unwrap_or(0);
            self.register_device(DeviceInfo::bare(key, id));
        }
        for d in &mut self.devices {
            d.advance(u64::MAX, window);
        }
        // The report's end: the latest end of accepted work when there is any (a memory or
        // energy timestamp cannot stretch it: one bad value would bill every open allocation
        // to it), else the latest memory, energy or opening time.
        let report_end = match self.devices.iter().map(|d| d.work_end).max() {
            Some(w) if w > 0 => w,
            _ => self.devices.iter().map(|d| d.last_ns).max().unwrap_or(0),
        };
        let tenants: Vec<String> = self.keys.iter().map(|k| self.tenant_of(k)).collect();
        let mut open_allocations = Vec::new();
        for d in &mut self.devices {
            let open = std::mem::take(&mut d.open);
            for ((_, address), a) in open {
                if !d.hold(a, report_end, window) {
                    continue;
                }
                // Held since after the report's end (made after the last work): billed 0,
                // carried from its own time.
                let billed_to = report_end.max(a.since);
                let k = &self.keys[a.key as usize];
                open_allocations.push(OpenAllocation {
                    device: d.info.id,
                    device_key: d.info.key.clone(),
                    address: format!("{address:#x}"),
                    bytes: Quantity(u128::from(a.bytes)),
                    tenant: tenants[a.key as usize].clone(),
                    process_id: k.process_id,
                    external_id: k.external_id,
                    allocated_at: rfc3339_ns(a.allocated_at),
                    billed_to: rfc3339_ns(billed_to),
                });
            }
        }
        for d in &self.devices {
            if let Some(f) = d.fault {
                return Err(d.error(f, window));
            }
        }
        let mut devices = Vec::new();
        let mut loss = Vec::new();
        let mut usage = Vec::new();
        let mut totals: BTreeMap<(String, u32, String, MeterKind), u128> = BTreeMap::new();
        let mut warnings = std::mem::take(&mut self.warnings);
        let mut order: Vec<&DeviceState> = self.devices.iter().collect();
        order.sort_by(|a, b| (a.info.id, &a.info.key).cmp(&(b.info.id, &b.info.key)));
        for d in order {
            let lost: u64 = d
                .loss
                .values()
                .fold(0u64, |a, l| a.saturating_add(l.records));
            if d.records == 0
                && lost == 0
                && d.memory_events == 0
                && d.energy.is_empty()
                && d.cells.is_empty()
            {
                continue;
            }
            let info = &d.info;
            let mut not_meterable = Vec::new();
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
            // warp_instructions: all or nothing per device (a partial count under-bills).
            let instr_meterable =
                d.kernels_with_instructions > 0 && d.kernels_without_instructions == 0;
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
            let left = d.budget.limit.saturating_sub(d.budget.used());
            let (energy, resets, gaps, unobserved) =
                energy_per_window(&d.energy, &d.energy_spans, window, &d.cells, left).map_err(
                    |(from, to, windows)| {
                        d.error(
                            DeviceFault::TooManyCells {
                                what: "energy samples",
                                from,
                                to,
                                windows,
                            },
                            window,
                        )
                    },
                )?;
            d.budget.used.fetch_add(
                energy.keys().filter(|w| !d.cells.contains_key(w)).count() as u64,
                AtomicOrdering::Relaxed,
            );
            // A device without kernels has no sm_ns anywhere: its energy is all idle.
            let energy_meterable = !energy.is_empty() && (sm_meterable || !has_kernels);
            if !energy.is_empty() && !energy_meterable {
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
            if resets > 0 {
                warnings.push(Warning::new(
                    WarningCode::EnergyCounterReset,
                    format!(
                        "the energy counter of device {} ({}) went down {resets} times (driver \
                     reload?): the energy between those samples is unknown and not billed",
                        info.id, info.key
                    ),
                ));
            }
            if unobserved > 0 {
                warnings.push(Warning::new(
                    WarningCode::EnergyUnobserved,
                    format!(
                    "{unobserved} stretches between energy samples of device {} ({}) lie between \
                     recordings (no recording observed them): their energy is not billed",
                    info.id, info.key
                ),
                ));
            }
            if gaps > 0 {
                warnings.push(Warning::new(
                    WarningCode::EnergyGap,
                    format!(
                    "{gaps} pairs of consecutive energy samples of device {} ({}) are more than \
                     7 days apart or rise faster than 100 kW: the energy between them is not \
                     billed",
                    info.id, info.key
                ),
                ));
            }
            if d.reallocations > 0 {
                warnings.push(Warning::new(
                    WarningCode::Reallocation,
                    format!(
                        "{} allocations on device {} ({}) were made at an address still held: the \
                     earlier allocation was closed there (a release record missing?)",
                        d.reallocations, info.id, info.key
                    ),
                ));
            }
            devices.push(DeviceEntry {
                device: info.id,
                device_key: info.key.clone(),
                name: info.name.clone(),
                sm_count: info.sm_count,
                compute_capability: info.compute_capability.map(|c| c.to_string()),
                not_meterable,
            });
            for (reason, n) in &d.loss {
                loss.push(LossEntry {
                    device: Some(info.id),
                    device_key: info.key.clone(),
                    reason: reason.as_str().to_string(),
                    records: n.records,
                    lower_bound: n.lower_bound,
                });
            }
            if lost > 0 {
                let at_least = if d.loss.values().any(|l| l.lower_bound) {
                    "at least "
                } else {
                    ""
                };
                warnings.push(Warning::new(
                    WarningCode::RecordsLost,
                    format!(
                        "{at_least}{lost} records lost on device {} ({}); see `loss`",
                        info.id, info.key
                    ),
                ));
            }
            let empty = Cell::default();
            let windows: BTreeSet<u64> = d
                .cells
                .keys()
                .copied()
                .chain(energy.keys().copied().filter(|_| energy_meterable))
                .collect();
            for w in windows {
                let cell = d.cells.get(&w).unwrap_or(&empty);
                let ws = rfc3339(w);
                let sms = info.sm_count.filter(|_| sm_meterable);
                let warp_sms = info.sm_count.filter(|_| warp_meterable);
                let mut quantities =
                    cell_quantities(cell, &tenants, sms, warp_sms).map_err(|meter| {
                        MeterError::QuantityOverflow {
                            device: info.id,
                            device_key: info.key.clone(),
                            meter,
                            window_start: Some(ws.clone()),
                        }
                    })?;
                if !instr_meterable {
                    quantities.retain(|(m, _)| *m != MeterKind::WarpInstructions);
                }
                if let Some(&e) = energy.get(&w).filter(|_| energy_meterable) {
                    let sm = quantities
                        .iter()
                        .find(|(m, _)| *m == MeterKind::SmNs)
                        .map(|(_, per)| per.as_slice())
                        .unwrap_or(&[]);
                    if e > 0 {
                        quantities.push((MeterKind::EnergyMj, apportion_energy(e, sm)));
                    }
                }
                for (meter, per_tenant) in quantities {
                    for (tenant, q) in per_tenant {
                        if q == 0 {
                            continue;
                        }
                        let t = totals
                            .entry((tenant.clone(), info.id, info.key.clone(), meter))
                            .or_insert(0);
                        *t = t
                            .checked_add(q)
                            .ok_or_else(|| MeterError::QuantityOverflow {
                                device: info.id,
                                device_key: info.key.clone(),
                                meter,
                                window_start: None,
                            })?;
                        usage.push(UsageRow {
                            tenant,
                            device: info.id,
                            device_key: info.key.clone(),
                            window_start: ws.clone(),
                            meter,
                            quantity: Quantity(q),
                        });
                    }
                }
            }
        }
        for ((source, reason), n) in &self.unplaced {
            loss.push(LossEntry {
                device: None,
                device_key: source.clone(),
                reason: reason.as_str().to_string(),
                records: n.records,
                lower_bound: n.lower_bound,
            });
            warnings.push(Warning::new(
                WarningCode::RecordsLost,
                format!(
                    "{}{} records of source {source} lost as {} on a device the source does not \
                 tell; see `loss`",
                    if n.lower_bound { "at least " } else { "" },
                    n.records,
                    reason.as_str()
                ),
            ));
        }
        let totals = totals
            .into_iter()
            .map(|((tenant, device, device_key, meter), q)| TotalRow {
                tenant,
                device,
                device_key,
                meter,
                quantity: Quantity(q),
            })
            .collect();
        if !open_allocations.is_empty() {
            warnings.push(Warning::new(
                WarningCode::OpenAllocations,
                format!(
                "{} allocations are still held at the report's end: billed to it and listed in \
                 open_allocations (pass this report to the next one with --opening)",
                open_allocations.len()
            ),
            ));
        }
        let (early_work, early_memory) = self.before_earlier_end;
        if early_work + early_memory > 0 {
            *self
                .counts
                .skipped
                .entry("billed_by_opening_report".to_string())
                .or_insert(0) += early_work + early_memory;
            warnings.push(Warning::new(
                WarningCode::BilledByOpeningReport,
                format!(
                "{early_work} work records and {early_memory} memory events of recordings that \
                 an earlier report of the chain (--opening) read up to a later time lie before \
                 that time: that report metered them, so they are not metered again (counted as \
                 skipped `billed_by_opening_report`)"
            ),
            ));
        }
        let extensions = self.extensions();
        let mut report = UsageReport {
            schema: USAGE_SCHEMA.to_string(),
            metering_policy: METERING_POLICY.to_string(),
            window_seconds: window.seconds(),
            complete: None,
            sources: self.sources,
            devices,
            records: self.counts,
            loss,
            usage,
            totals,
            open_allocations,
            warnings,
            extensions,
            sha256: String::new(),
        };
        report.complete = Some(report.derived_complete());
        report.seal()?;
        Ok(report)
    }

    /// The report's `extensions`: the recordings read by this report and the reports it
    /// continues, and the sources those metered.
    fn extensions(&self) -> crate::report::Extensions {
        let mut ends = self.earlier.recordings.clone();
        for (rec, per) in &self.recording_ends {
            let mine = ends.entry(rec.clone()).or_default();
            for (k, &t) in per {
                let v = mine.entry(k.clone()).or_insert(t);
                *v = (*v).max(t);
            }
        }
        crate::report::Extensions {
            recordings: ends
                .into_iter()
                .map(|(recording, per)| crate::report::RecordingEnds {
                    recording,
                    device_ends: per
                        .into_iter()
                        .map(|(device_key, t)| crate::report::DeviceEnd {
                            device_key,
                            end: rfc3339_ns(t),
                        })
                        .collect(),
                })
                .collect(),
            earlier_sources: self.earlier.sources.keys().cloned().collect(),
            other: serde_json::Map::new(),
        }
    }

    fn tenant_of(&self, k: &AttrKey) -> String {
        if let Some(t) = k.external_id.and_then(|e| self.tenant_map.external.get(&e)) {
            return t.as_str().to_string();
        }
        if let Some(t) = k.process_id.and_then(|p| self.tenant_map.pid.get(&p)) {
            return t.as_str().to_string();
        }
        k.source_tenant
            .as_ref()
            .map_or_else(|| UNATTRIBUTED.to_string(), |t| t.as_str().to_string())
    }
}

/// Per meter, per tenant quantities: (meter, [(tenant, quantity)]).
type CellQuantities = Vec<(MeterKind, Vec<(String, u128)>)>;

/// Per meter, per tenant integer quantities of one cell, in meter order then tenant order.
///
/// # Errors
/// The meter whose per-tenant sum (several attribution keys of one tenant) exceeds
/// `u128::MAX`.
fn cell_quantities(
    cell: &Cell,
    tenants: &[String],
    sm_count: Option<u32>,
    warp_sm_count: Option<u32>,
) -> Result<CellQuantities, MeterKind> {
    let mut out: BTreeMap<MeterKind, BTreeMap<String, u128>> = BTreeMap::new();
    for (&(key, meter), &q) in &cell.ints {
        let t = out
            .entry(meter)
            .or_default()
            .entry(tenants[key as usize].clone())
            .or_insert(0);
        *t = t.checked_add(q).ok_or(meter)?;
    }
    // gpu_busy_ns: each set's length divided equally among its distinct tenants.
    let mut busy: BTreeMap<String, BigRational> = BTreeMap::new();
    let mut busy_total: u128 = 0;
    for (set, &len) in &cell.busy {
        busy_total += len;
        let ts: BTreeSet<&String> = set.iter().map(|&k| &tenants[k as usize]).collect();
        let share = BigRational::new(BigInt::from(len), BigInt::from(ts.len()));
        for t in ts {
            *busy.entry(t.clone()).or_insert_with(BigRational::zero) += &share;
        }
    }
    if busy_total > 0 {
        out.insert(MeterKind::GpuBusyNs, largest_remainder(busy, busy_total));
    }
    if sm_count.is_some() {
        // Σ over tenants is an integer when only the device caps: per elementary interval the
        // capped shares sum to len × SMs. Partition caps can leave a fraction: floored.
        if let Some(q) = capped_shares(&cell.sm_exact, &cell.sm_capped, tenants) {
            out.insert(MeterKind::SmNs, q);
        }
    }
    if warp_sm_count.is_some() {
        // Σ over tenants may be fractional when capped: the cell's total is its floor.
        if let Some(q) = capped_shares(&cell.warp_exact, &cell.warp_capped, tenants) {
            out.insert(MeterKind::WarpNs, q);
        }
    }
    Ok(out
        .into_iter()
        .map(|(m, per)| (m, per.into_iter().collect()))
        .collect())
}

/// Per tenant integer shares of a capped time meter: `exact` per key plus, per key and
/// distinct cap factor `num / den`, `value × num / den`; exact rationals, the cell's total
/// floored, then largest remainder. `None` when the total is 0.
fn capped_shares(
    exact: &HashMap<u32, u128>,
    capped: &HashMap<u32, BTreeMap<Factor, u128>>,
    tenants: &[String],
) -> Option<BTreeMap<String, u128>> {
    let mut shares: BTreeMap<String, BigRational> = BTreeMap::new();
    for (&k, &q) in exact {
        *shares
            .entry(tenants[k as usize].clone())
            .or_insert_with(BigRational::zero) += BigRational::from_integer(BigInt::from(q));
    }
    for (&k, per_h) in capped {
        let e = shares
            .entry(tenants[k as usize].clone())
            .or_insert_with(BigRational::zero);
        for (&(num, den), &v) in per_h {
            *e += BigRational::new(BigInt::from(v) * BigInt::from(num), BigInt::from(den));
        }
    }
    let total = shares
        .values()
        .fold(BigRational::zero(), |a, b| a + b)
        .floor()
        .to_integer();
    total
        .to_u128()
        .filter(|&t| t > 0)
        .map(|t| largest_remainder(shares, t))
}

/// Energy per window of one device from its cumulative-counter samples (docs/METERING.md, "The meters" (energy_mj)):
/// within each run of samples (a run ends where the counter goes down), the counter is
/// interpolated linearly between consecutive samples, and a window's energy is
/// `⌊E(window end)⌋ − ⌊E(window start)⌋` clipped to the run, so the windows of a run sum
/// exactly to its last minus first sample. Returns the energy per window start (windows with
/// energy only), how many times the counter went down, how many pairs of consecutive samples
/// are implausible (more than 7 days apart, or rising faster than 100 kW), and, when `spans`
/// are given, how many pairs no span covers (between recordings); none of those is billed.
///
/// # Errors
/// `(first sample, last sample, windows)` as soon as the windows with energy that `cells` does
/// not hold yet pass `left` (the report's cell budget): nothing is booked.
fn energy_per_window(
    samples: &[(u64, u64)],
    spans: &[(u64, u64)],
    window: WindowSize,
    cells: &BTreeMap<u64, Cell>,
    left: u64,
) -> Result<EnergyWindows, (u64, u64, u64)> {
    let mut s = samples.to_vec();
    s.sort_unstable();
    // One sample per timestamp (the first after sorting: the smallest reading).
    s.dedup_by_key(|p| p.0);
    let mut out: BTreeMap<u64, u128> = BTreeMap::new();
    let mut resets = 0u64;
    let mut gaps = 0u64;
    let mut unobserved = 0u64;
    let mut new_windows = 0u64;
    for pair in s.windows(2) {
        let ((t0, e0), (t1, e1)) = (pair[0], pair[1]);
        if !spans.is_empty() && !spans.iter().any(|&(a, b)| a <= t0 && t1 <= b) {
            unobserved += 1;
            continue;
        }
        if e1 < e0 {
            resets += 1;
            continue;
        }
        // Samples more than 7 days apart (a clock fault, or a counter read once long ago):
        // interpolating between them would spread energy over a span no report observed.
        // Or a rise no GPU can draw: over 100 kW (0.1 mJ per ns) is a counter fault.
        if t1 - t0 > MAX_RECORD_NS || u128::from(e1 - e0) * 10 > u128::from(t1 - t0) {
            gaps += 1;
            continue;
        }
        let (dt, de) = (u128::from(t1 - t0), u128::from(e1 - e0));
        // Energy from t0 to t, floored: ⌊de × (t − t0) / dt⌋ (exact in u128 for any u64s
        // whose product fits; saturated otherwise, which only arises beyond 2^64 mJ).
        let upto = |t: u64| de.saturating_mul(u128::from(t - t0)) / dt;
        let mut t = t0;
        let mut booked = 0u128;
        while t < t1 {
            let w = window.start_of(t);
            let edge = w.saturating_add(window.ns()).min(t1);
            let e = if edge == t1 { de } else { upto(edge) };
            if e > booked {
                if !cells.contains_key(&w) && !out.contains_key(&w) {
                    new_windows += 1;
                    if new_windows > left {
                        let (first, last) = (s[0].0, s[s.len() - 1].0);
                        return Err((first, last, new_windows));
                    }
                }
                *out.entry(w).or_insert(0) += e - booked;
            }
            booked = e;
            t = edge;
        }
    }
    Ok((out, resets, gaps, unobserved))
}

/// Energy per window start, how many times the counter went down, implausible pairs, pairs no
/// recording observed ([`energy_per_window`]).
type EnergyWindows = (BTreeMap<u64, u128>, u64, u64, u64);

/// Splits a window's energy `e` (mJ) among tenants in proportion to their `sm_ns` in the
/// window (largest remainder); all of it to [`IDLE`] when nobody has `sm_ns` there.
fn apportion_energy(e: u128, sm: &[(String, u128)]) -> Vec<(String, u128)> {
    let total: u128 = sm.iter().map(|(_, q)| q).sum();
    if total == 0 {
        return vec![(IDLE.to_string(), e)];
    }
    let shares: BTreeMap<String, BigRational> = sm
        .iter()
        .filter(|(_, q)| *q > 0)
        .map(|(t, q)| {
            (
                t.clone(),
                BigRational::new(BigInt::from(e) * BigInt::from(*q), BigInt::from(total)),
            )
        })
        .collect();
    largest_remainder(shares, e).into_iter().collect()
}

/// Reads an `open_allocations` address: `0x`-prefixed hex or decimal.
fn parse_address(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => t.parse(),
    };
    r.map_err(|_| format!("address: `{text}` is not a 64-bit address (0x… hex or decimal)"))
}

/// Resident warps per SM of kernel `k` holding `held` SMs on device `info` (docs/METERING.md):
/// min(active blocks per SM, ⌈blocks ÷ held⌉) × warps per block, active blocks from the
/// occupancy calculator in corrected mode. `None` when a fact is unknown (the device's SM count
/// or compute capability; the kernel's grid, block, registers or shared memory) or the
/// calculator refuses the launch.
fn resident_warps(info: &DeviceInfo, k: &crate::record::KernelLaunch, held: u32) -> Option<u32> {
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

/// Turns exact rational shares summing to `total` into integers summing to `total`: floors,
/// then one unit each to the largest fractional parts, ties to the tenant name that sorts first
/// (bytewise). docs/METERING.md, "Common rules" (cells and integer shares).
fn largest_remainder(shares: BTreeMap<String, BigRational>, total: u128) -> BTreeMap<String, u128> {
    let mut floors: BTreeMap<String, u128> = BTreeMap::new();
    let mut fracs: Vec<(BigRational, String)> = Vec::new();
    let mut sum: u128 = 0;
    for (t, r) in shares {
        let f = r.floor();
        let fi = f.to_integer().to_u128().unwrap_or(0);
        sum += fi;
        fracs.push((r - f, t.clone()));
        floors.insert(t, fi);
    }
    let mut left = total.saturating_sub(sum);
    // Largest fraction first; equal fractions: name ascending.
    fracs.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    for (_, t) in fracs {
        if left == 0 {
            break;
        }
        if let Some(v) = floors.get_mut(&t) {
            *v += 1;
            left -= 1;
        }
    }
    floors
}

impl DeviceState {
    /// Notes a record under its duplicate key; `false` when it is a duplicate: a record with
    /// the same identity whose joined facts agree was seen.
    fn first_of(&mut self, key: DupKey, joined: Joined) -> bool {
        let seen = self.dups.entry(key).or_default();
        if seen.iter().any(|j| j.agrees(&joined)) {
            return false;
        }
        seen.push(joined);
        true
    }

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

    /// Starts the sweep at the first record, and moves it on to `max start − horizon`.
    fn note_start(&mut self, start: u64, horizon: u64, window: WindowSize) {
        if !self.started {
            self.started = true;
            self.swept_to = start.saturating_sub(horizon);
        }
        if start > self.max_start {
            self.max_start = start;
            let to = self.max_start.saturating_sub(horizon);
            if to > self.swept_to {
                self.advance(to, window);
            }
        }
    }

    /// Books allocation `a` as held until `end`, for as long as that is (docs/METERING.md: memory
    /// may be held for any time; the 7-day plausibility bound is for work records). Returns
    /// `false`, booking nothing, when the hold would take the device past
    /// [`MeterConfig::max_cells`] cells ([`Meter::finish`] then fails).
    fn hold(&mut self, a: OpenAlloc, end: u64, window: WindowSize) -> bool {
        self.book_memory(a.key, a.since, end, a.bytes, window)
    }

    /// Books `bytes` held by `key` over `[a, b)` as `memory_byte_ns`, split at window edges.
    /// Each window's part, `bytes × ns` < 2^128, is exact; a cell whose sum would pass
    /// `u128::MAX` is a fault ([`MeterError::QuantityOverflow`]), never a clamp. A span that
    /// would add windows beyond the device's limit books nothing and is a fault
    /// ([`MeterError::TooManyCells`]). Returns whether it was booked.
    fn book_memory(&mut self, key: u32, a: u64, b: u64, bytes: u64, window: WindowSize) -> bool {
        if b <= a {
            return true;
        }
        // Windows the span touches, and how many of them the device does not hold yet.
        let (first, last) = (window.start_of(a), window.start_of(b - 1));
        let spanned = (last - first) / window.ns() + 1;
        let now = self.budget.used();
        // Counting the windows already held costs a walk: only when the bound says it may
        // matter.
        if now.saturating_add(spanned) > self.budget.limit
            && now.saturating_add(spanned - self.cells.range(first..=last).count() as u64)
                > self.budget.limit
        {
            self.fault.get_or_insert(DeviceFault::TooManyCells {
                what: "memory held",
                from: a,
                to: b,
                windows: spanned,
            });
            return false;
        }
        let mut t = a;
        while t < b {
            let w = window.start_of(t);
            let edge = w.saturating_add(window.ns()).min(b);
            let q = cell_at(&mut self.cells, &self.budget, &mut self.fault, w, window)
                .ints
                .entry((key, MeterKind::MemoryByteNs))
                .or_insert(0);
            let part = u128::from(bytes) * u128::from(edge - t);
            add_checked(q, part, &mut self.fault, MeterKind::MemoryByteNs, w);
            t = edge;
        }
        true
    }

    /// Pairs the memory events before `to` (exclusive; all of them for `u64::MAX`).
    fn advance_memory(&mut self, to: u64, window: WindowSize) {
        while let Some(Reverse(m)) = self.mem_pending.peek().copied() {
            if m.ts >= to && to != u64::MAX {
                break;
            }
            self.mem_pending.pop();
            if m.op == 2 {
                let ended: Vec<HeldAt> = self
                    .open
                    .range((m.pid, 0)..=(m.pid, u64::MAX))
                    .map(|(k, _)| *k)
                    .collect();
                for k in ended {
                    if let Some(a) = self.open.remove(&k) {
                        self.hold(a, m.ts, window);
                    }
                }
            } else if m.op == 1 {
                match self.open.remove(&(m.pid, m.address)) {
                    Some(a) => {
                        self.hold(a, m.ts, window);
                    }
                    None => {
                        self.loss
                            .entry(LossReason::ReleaseWithoutAllocation)
                            .or_default()
                            .add(1, false);
                    }
                }
            } else {
                let new = OpenAlloc {
                    since: m.ts,
                    allocated_at: m.allocated_at,
                    bytes: m.bytes,
                    key: m.key,
                };
                if let Some(prev) = self.open.insert((m.pid, m.address), new) {
                    self.reallocations += 1;
                    self.hold(prev, m.ts, window);
                }
            }
        }
    }

    /// Books every elementary interval before `to` (exclusive) and moves the sweep there.
    fn advance(&mut self, to: u64, window: WindowSize) {
        self.advance_memory(to, window);
        loop {
            let next_start = self
                .pending
                .peek()
                .map(|Reverse(p)| p.start)
                .filter(|&s| s <= to);
            let next_end = self.active.iter().map(|a| a.end).min().filter(|&e| e <= to);
            let next = match (next_start, next_end) {
                (None, None) => break,
                (Some(a), None) | (None, Some(a)) => a,
                (Some(a), Some(b)) => a.min(b),
            };
            if !self.active.is_empty() && next > self.swept_to {
                self.book(self.swept_to, next, window);
            }
            self.swept_to = self.swept_to.max(next);
            let t = self.swept_to;
            let before = self.active.len();
            self.active.retain(|a| a.end > t);
            let mut changed = before != self.active.len();
            while let Some(Reverse(p)) = self.pending.peek().copied() {
                if p.start > t {
                    break;
                }
                self.pending.pop();
                if p.end > t {
                    self.active.push(Active {
                        end: p.end,
                        key: p.key,
                        held: p.held,
                        warps: p.warps,
                        part: p.part,
                        start: p.start,
                        kernel: p.kernel,
                    });
                    changed = true;
                }
            }
            if changed {
                self.summary = None;
            }
        }
        if to > self.swept_to {
            if !self.active.is_empty() {
                self.book(self.swept_to, to, window);
            }
            self.swept_to = to;
        }
        // Duplicate detection only needs records the sweep has not passed.
        let cut = self.swept_to;
        while let Some((first, _)) = self.dups.first_key_value() {
            if first.0 >= cut {
                break;
            }
            self.dups.pop_first();
        }
    }

    /// The summary of the active set: per (key, cap factor) Σ held and Σ held × warps. The
    /// partition cap scales a green context's kernels by `S_p / H_p` when they hold more
    /// (`H_p`) than its `S_p` SMs; the device cap then scales everything by `S / T` when the
    /// SMs held after partition caps, `T`, exceed the device's `S` (docs/METERING.md, "The meters" (the SM cap)).
    fn summarize(&self) -> ActiveSummary {
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

    /// Books `[a, b)` with the current active set, split at window edges.
    fn book(&mut self, a: u64, b: u64, window: WindowSize) {
        if self.summary.is_none() {
            self.summary = Some(self.summarize());
        }
        let Some(ActiveSummary { keys, held }) = self.summary.as_ref() else {
            return;
        };
        let sms = self.info.sm_count.is_some();
        let mut t = a;
        while t < b {
            let w = window.start_of(t);
            let edge = w.saturating_add(window.ns()).min(b);
            let len = u128::from(edge - t);
            let cell = cell_at(&mut self.cells, &self.budget, &mut self.fault, w, window);
            *cell.busy.entry(keys.clone()).or_insert(0) += len;
            if sms {
                for &(k, f, h, hw) in held {
                    match f {
                        None => {
                            *cell.sm_exact.entry(k).or_insert(0) += len * u128::from(h);
                            if hw > 0 {
                                *cell.warp_exact.entry(k).or_insert(0) += len * hw;
                            }
                        }
                        Some(f) => {
                            *cell.sm_capped.entry(k).or_default().entry(f).or_insert(0) +=
                                len * u128::from(h);
                            if hw > 0 {
                                *cell.warp_capped.entry(k).or_default().entry(f).or_insert(0) +=
                                    len * hw;
                            }
                        }
                    }
                }
            }
            t = edge;
        }
    }
}
