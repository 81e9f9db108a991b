//! Registering devices: a device described by several sources (descriptions merged field by
//! field in the order of the sources' SHA-256), its partitions (green contexts), catalog
//! overrides and facts filled in from a copy of its work.

use super::*;

use std::collections::BTreeMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

impl Meter {
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
            self.describe_again(slot, rank, info);
            return slot;
        }
        let descriptions = vec![(rank, info.clone())];
        let slot = DeviceSlot(self.devices.len() as u32);
        self.device_index.insert(info.key.clone(), slot);
        self.devices.push(DeviceState::new(
            info,
            descriptions,
            self.drained_to,
            &self.budget,
        ));
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

    /// A further description of the device registered under `slot` (by the source ranked
    /// `rank`): a warning when it differs in name or SM count; the device's facts become the
    /// descriptions merged field by field in source-SHA order.
    fn describe_again(&mut self, slot: DeviceSlot, rank: String, info: DeviceInfo) {
        let d = &mut self.devices[slot.0 as usize];
        let known = &d.info;
        let name_differs = matches!((&known.name, &info.name), (Some(a), Some(b)) if a != b);
        let sms_differ = matches!((known.sm_count, info.sm_count), (Some(a), Some(b)) if a != b);
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
    }

    /// Declares a partition of a device's SMs: a green context (CUPTI CONTEXT record with
    /// `isGreenContext` and `numMultiprocessors`). Records whose [`ActivityRecord::partition`]
    /// is the returned id hold at most `sm_count` SMs and are capped to it before the device
    /// cap. The source maps its own context ids to partitions
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

    /// Overrides fields of a registered device (a device catalog entry): every field
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
}

impl DeviceState {
    /// A device first registered (by the source ranked first in `descriptions`): nothing
    /// booked, its sweep at the meter's drained edge (`drained_to`; after a drain the
    /// handed-over windows are closed on new devices too), its cells in the meter's `budget`.
    fn new(
        info: DeviceInfo,
        descriptions: Vec<(String, DeviceInfo)>,
        drained_to: u64,
        budget: &Arc<CellBudget>,
    ) -> Self {
        DeviceState {
            info,
            descriptions,
            pending: MostlySorted::new(),
            run: Running::default(),
            // After a drain the handed-over windows are closed on new devices too.
            swept_to: drained_to,
            started: drained_to > 0,
            max_start: 0,
            dups: DupTable::default(),
            cells: Cells::default(),
            slots: Slots::default(),
            loss: BTreeMap::new(),
            fault: None,
            budget: Arc::clone(budget),
            records: 0,
            kernels_without_grid: 0,
            kernels_without_occupancy: 0,
            summary: ActiveSummary::default(),
            sets: Vec::new(),
            set_index: FxHashMap::default(),
            occupancy: OccupancyCache::default(),
            partitions: Vec::new(),
            mem_pending: MostlySorted::new(),
            open: BTreeMap::new(),
            kernels: 0,
            memory_events: 0,
            reallocations: 0,
            energy: Vec::new(),
            energy_spans: Vec::new(),
            pm: Box::default(),
            kernels_with_instructions: 0,
            kernels_without_instructions: 0,
            kernels_with_ops: [0; 4],
            kernels_without_ops: [0; 4],
            op_slab: Vec::new(),
            op_free: Vec::new(),
            kernels_over_limit: 0,
            starting: Vec::new(),
            last_ns: 0,
            work_end: 0,
        }
    }
}
