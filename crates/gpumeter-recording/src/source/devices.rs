//! The devices of a source (DEVICE records, a `.gmr`'s inventory, the ids records name),
//! registered in order of first activity, and the records of damaged frames placed on them.

use super::*;

/// The devices of a source, registered locally in order of first activity.
pub(crate) struct Devices<'a> {
    pub(crate) source: &'a str,
    pub(crate) inventory: &'a [GmrDevice],
    pub(crate) device_recs: &'a BTreeMap<u32, (DeviceRecord, Option<Arc<str>>)>,
    pub(crate) devices: Vec<DeviceInfo>,
    pub(crate) index: FxHashMap<u32, DeviceSlot>,
}

impl Devices<'_> {
    /// Places energy samples (device id, timestamp in ns, counter in mJ) of a device CUPTI or
    /// the inventory knows (by CUDA ordinal) on its slot, registering it if it has none yet;
    /// the others are not metered, and one warning of `source` counts them.
    pub(crate) fn place_energy(
        &mut self,
        samples: impl IntoIterator<Item = (u32, u64, u64)>,
        source: &str,
        warnings: &mut Vec<gpumeter_core::Warning>,
    ) -> Vec<(DeviceSlot, u64, u64)> {
        let mut energy = Vec::new();
        let mut unplaced = 0u64;
        for (id, timestamp_ns, energy_mj) in samples {
            if self.describes(id) && id != crate::gmr::UNKNOWN_DEVICE {
                energy.push((self.slot(id), timestamp_ns, energy_mj));
            } else {
                unplaced += 1;
            }
        }
        if unplaced > 0 {
            warnings.push(gpumeter_core::Warning::new(
                gpumeter_core::WarningCode::UnplacedEnergySamples,
                format!(
                    "{source}: {unplaced} energy samples name a device the recording does not \
                 describe; not metered"
                ),
            ));
        }
        energy
    }

    /// Places PM-sample frames (by CUDA ordinal, as energy samples) on the slot of a device
    /// CUPTI or the inventory knows, registering it if it has none yet; the samples of other
    /// devices are not metered, and one warning of `source` counts them (code
    /// `unplaced_pm_samples`). The samples keep the file's order.
    pub(crate) fn place_pm(
        &mut self,
        frames: &[crate::gmr::PmSamples],
        source: &str,
        warnings: &mut Vec<gpumeter_core::Warning>,
    ) -> Vec<(DeviceSlot, PmSample)> {
        let counts: Vec<(u32, u64)> = frames
            .iter()
            .map(|f| (f.device_id, f.samples.len() as u64))
            .collect();
        self.place_pm_devices(&counts, source, warnings);
        let mut placed = Vec::new();
        for f in frames {
            let id = f.device_id;
            if let Some(&slot) = self
                .index
                .get(&id)
                .filter(|_| id != crate::gmr::UNKNOWN_DEVICE)
            {
                placed.extend(f.samples.iter().map(|x| (slot, *x)));
            }
        }
        placed
    }

    /// [`Devices::place_pm`] for a source that only counts its PM-sample frames (device id,
    /// samples), in file order: registers the devices it places in the same order and warns
    /// the same way; the samples of a placed device id are then those of its slot in
    /// `index`.
    pub(crate) fn place_pm_devices(
        &mut self,
        frames: &[(u32, u64)],
        source: &str,
        warnings: &mut Vec<gpumeter_core::Warning>,
    ) {
        let (mut unplaced, mut devices) = (0u64, BTreeSet::new());
        for &(id, n) in frames {
            if self.describes(id) && id != crate::gmr::UNKNOWN_DEVICE {
                self.slot(id);
            } else if n > 0 {
                unplaced += n;
                devices.insert(id);
            }
        }
        if unplaced > 0 {
            let ids: Vec<String> = devices.iter().map(u32::to_string).collect();
            warnings.push(gpumeter_core::Warning::new(
                gpumeter_core::WarningCode::UnplacedPmSamples,
                format!(
                    "{source}: {unplaced} PM samples name a device the recording does not \
                 describe (CUDA ordinal {}); not metered (sm_active_ns, dram_bytes)",
                    ids.join(", ")
                ),
            ));
        }
    }

    /// Whether the source describes device `id` anywhere: a record of it, a DEVICE record or an
    /// inventory entry (by CUDA ordinal).
    pub(crate) fn describes(&self, id: u32) -> bool {
        self.index.contains_key(&id)
            || self.device_recs.contains_key(&id)
            || self.inventory.iter().any(|d| d.id == id)
    }

    /// Books records CUPTI dropped as losses: per device (a device id the source describes
    /// nowhere is not made a device of its own; one not given is the context's device, else
    /// the source's only device), the others on the source with a warning each. A per-device
    /// sum past 64 bits is a lower bound. Returns how many were dropped in all (saturating).
    pub(crate) fn book_dropped(
        &mut self,
        dropped: &[DroppedRecords],
        device_of_context: &FxHashMap<u32, u32>,
        source: &str,
        warnings: &mut Vec<gpumeter_core::Warning>,
        losses: &mut Vec<(DeviceSlot, LossReason, u64, bool)>,
        source_losses: &mut Vec<(LossReason, u64, bool)>,
    ) -> u64 {
        let mut total = 0u64;
        // Per device (None: unknown), the dropped count and whether its sum passed 64 bits
        // (then it is a lower bound).
        let mut per_device: BTreeMap<Option<DeviceSlot>, (u64, bool)> = BTreeMap::new();
        for d in dropped {
            if d.count == 0 {
                continue;
            }
            let device = match d.device_id {
                Some(id) if self.describes(id) => Some(id),
                // Named, but described nowhere: which device it is cannot be told.
                Some(_) => None,
                None => device_of_context
                    .get(&d.context_id)
                    .copied()
                    .or_else(|| self.only_device()),
            };
            let slot = device.map(|id| self.slot(id));
            let n = per_device.entry(slot).or_insert((0, false));
            *n = match n.0.checked_add(d.count) {
                Some(v) => (v, n.1),
                None => (u64::MAX, true),
            };
            total = total.saturating_add(d.count);
            if slot.is_none() {
                warnings.push(gpumeter_core::Warning::new(
                    gpumeter_core::WarningCode::DroppedWithoutDevice,
                    format!(
                    "{source}: {} records dropped by CUPTI in context {} stream {} belong to a \
                     device the recording does not tell: booked as loss on the source",
                    d.count, d.context_id, d.stream_id
                ),
                ));
            }
        }
        for (slot, (n, overflowed)) in per_device {
            match slot {
                Some(s) => losses.push((s, LossReason::Dropped, n, overflowed)),
                None => source_losses.push((LossReason::Dropped, n, overflowed)),
            }
        }
        total
    }

    /// The green contexts (device id, context id) → SMs of devices with activity only (a
    /// green context without work bills nothing): (slot, context id, SMs) in key order.
    pub(crate) fn partitions(
        &self,
        green: &BTreeMap<(u32, u32), u32>,
    ) -> Vec<(DeviceSlot, u32, u32)> {
        let mut partitions = Vec::new();
        for (&(device, context), &sms) in green {
            if let Some(&slot) = self.index.get(&device) {
                partitions.push((slot, context, sms));
            }
        }
        partitions
    }

    pub(crate) fn slot(&mut self, id: u32) -> DeviceSlot {
        if let Some(&s) = self.index.get(&id) {
            return s;
        }
        let info = self.info(id);
        let s = DeviceSlot(self.devices.len() as u32);
        self.devices.push(info);
        self.index.insert(id, s);
        s
    }

    /// The one device id the source knows of, if exactly one.
    pub(crate) fn only_device(&self) -> Option<u32> {
        let mut ids: Vec<u32> = self.index.keys().copied().collect();
        ids.extend(self.device_recs.keys().copied());
        ids.extend(self.inventory.iter().map(|d| d.id));
        ids.sort_unstable();
        ids.dedup();
        match ids.as_slice() {
            [one] => Some(*one),
            _ => None,
        }
    }

    pub(super) fn info(&self, id: u32) -> DeviceInfo {
        let from_record = self
            .device_recs
            .get(&id)
            .map(|(d, name)| device_info(self.source, d, name.as_deref()));
        let from_inventory = self
            .inventory
            .iter()
            .find(|d| d.id == id)
            .map(|d| inventory_info(self.source, d));
        match (from_record, from_inventory) {
            (Some(mut r), Some(i)) => {
                if r.uuid.is_none() && i.uuid.is_some() {
                    r.key.clone_from(&i.key);
                }
                r.fill_from(&i);
                r
            }
            (Some(r), None) => r,
            (None, Some(i)) => i,
            (None, None) => DeviceInfo::bare(DeviceInfo::source_key(self.source, id), id),
        }
    }
}

/// The records a damaged `.gmr` frame held, as far as its bytes tell: per device id (`None`
/// where the device cannot be trusted), whether the count is exact, and what the frame was.
///
/// A torn activity buffer whose payload is all there (only the checksum missing) is walked
/// whole: the count is exact. A buffer cut short, or any frame whose checksum does not match,
/// is walked as far as it decodes: a lower bound, and after a checksum mismatch a device id
/// counts only if the recording knows that device (`known`), since the bytes may be
/// corrupted. Work records and device-memory events are counted (what metering would have
/// used). A dropped-records frame's count is a count of lost records itself.
///
/// A frame whose type field says PM samples (type 9) is counted in PM samples instead (the
/// last item says which unit): the count its header gives where the bytes make it plausible
/// ([`DamagedFrame::pm_sample_count`]), on its device only when the recording describes that
/// device (as samples are placed); when no count can be trusted, at least one sample of no
/// device.
pub(super) fn damaged_records(
    d: &DamagedFrame,
    api: ApiVersion,
    known: &dyn Fn(u32) -> bool,
) -> (BTreeMap<Option<u32>, u64>, bool, &'static str, &'static str) {
    let mut per: BTreeMap<Option<u32>, u64> = BTreeMap::new();
    if d.frame_type == Some(crate::gmr::T_PM_SAMPLES) {
        let what = if d.type_trusted() {
            "a PM-samples frame"
        } else {
            "a frame whose type (PM samples) cannot be trusted"
        };
        let (id, n, exact) = match d.pm_sample_count() {
            Some((id, n, exact)) => (Some(id), n, exact),
            None => (None, 1, false),
        };
        let id = id.filter(|&id| known(id) && id != crate::gmr::UNKNOWN_DEVICE);
        if n > 0 || !exact {
            per.insert(id, n);
        }
        return (per, exact, what, "PM samples");
    }
    // Only bytes cut short by the end of the file are the producer's as written; after a
    // checksum mismatch nothing is (the type and length fields included).
    let trusted = d.damage == Damage::Torn(TornReason::ShortRead);
    let place = |id: u32| (trusted || known(id)).then_some(id);
    if d.frame_type == Some(crate::gmr::T_OP_COUNTS) && d.type_trusted() {
        // It holds no records; its kernels are left without operation counts, so the FLOP
        // meters of their device are not meterable (or absent when no kernel has counts).
        return (
            per,
            true,
            "an operation-counters frame (its kernels have no FLOP counts)",
            "records",
        );
    }
    if d.holds_no_records() {
        return (per, true, "a frame that holds no records", "records");
    }
    match d.parse() {
        Some(Frame::Dropped(x)) => {
            if x.count > 0 {
                let id = x.device_id.and_then(place);
                per.insert(id, x.count);
            }
            return (per, trusted, "a dropped-records count", "records");
        }
        Some(Frame::ActivityBuffer(_)) => {}
        Some(_) => return (per, true, "a frame that holds no records", "records"),
        // A frame of a type that holds records but whose payload cannot be read (malformed:
        // its count is unknown), or of a type that cannot be trusted: its bytes are walked as
        // a buffer below, whatever its type field says.
        None if d.type_trusted() && !d.is_activity_buffer() => {
            return (per, false, "a frame of unknown content", "records");
        }
        None => {}
    }
    let mut whole = true;
    for r in Walk::new(&d.payload, api) {
        let Ok(r) = r else {
            whole = false;
            break;
        };
        let id = match &r.record {
            Record::Kernel(k) => k.device_id,
            Record::Memcpy(m) => m.device_id,
            Record::PeerCopy(p) => p.device_id,
            Record::Memset(m) => m.device_id,
            Record::GraphTrace(g) => g.device_id,
            Record::Memory(m)
                if DEVICE_MEMORY_KINDS.contains(&m.memory_kind)
                    && !matches!(m.operation, MemoryOperation::Other(_)) =>
            {
                m.device_id
            }
            _ => continue,
        };
        *per.entry(place(id)).or_insert(0) += 1;
    }
    let exact = trusted && d.complete && whole;
    let what = if d.type_trusted() {
        "an activity buffer"
    } else {
        "a frame whose type cannot be trusted, read as an activity buffer"
    };
    (per, exact, what, "records")
}

pub(super) fn inventory_info(source: &str, d: &GmrDevice) -> DeviceInfo {
    let uuid = d
        .uuid
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(DeviceInfo::uuid_key);
    let mut info = DeviceInfo::bare(
        uuid.clone()
            .unwrap_or_else(|| DeviceInfo::source_key(source, d.id)),
        d.id,
    );
    info.uuid = uuid;
    info.name.clone_from(&d.name);
    info.sm_count = d.sm_count.filter(|&n| n > 0);
    info.compute_capability = d
        .compute_capability
        .as_deref()
        .and_then(|c| c.parse::<ComputeCapability>().ok());
    info
}
