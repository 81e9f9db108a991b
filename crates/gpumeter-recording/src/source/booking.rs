//! Booking a source on the meter, shared by whole sources and streamed files: its devices,
//! green contexts, losses and warnings, energy spans, and the PM samples read earlier.

use super::*;

/// Counts a record [`convert`] refuses for an invalid field: one more invalid record of its
/// device in `invalid`, and one more of its field in `faults` with, for the field's first,
/// the error that names source, frame, offset and value (the warning's text).
pub(crate) fn note_invalid(
    invalid: &mut BTreeMap<u32, u64>,
    faults: &mut BTreeMap<&'static str, (u64, String)>,
    name: &str,
    frame: Option<FrameRef>,
    r: &LocatedRecord,
    bad: InvalidField,
) {
    let InvalidField {
        device_id,
        field,
        value,
    } = bad;
    *invalid.entry(device_id).or_insert(0) += 1;
    let slot = faults.entry(field).or_insert_with(|| {
        let e = CuptiSourceError::Decode {
            name: name.to_string(),
            frame,
            error: DecodeError::BadField {
                offset: r.offset,
                kind: r.kind,
                field,
                value,
                reason: INVALID_KERNEL_FIELD,
            },
        };
        (0, e.to_string())
    });
    slot.0 += 1;
}

/// How a source was instrumented, for its `instrumented_run` warning: by what (`SASS
/// metrics`, `INSTRUCTION_EXECUTION records`), and whether it holds PM samples (then
/// `sm_active_ns` is named among what the instrumentation inflates: [`instrumented_meters`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Instrumented<'a> {
    pub(crate) by: &'a str,
    pub(crate) pm_sampled: bool,
}

/// The warnings (and source losses) of how a source was recorded: each buffer that stops
/// decoding (a `corrupt_frame` loss of unknown size), an unfinished recording, an
/// instrumented run, frames of unknown types.
pub(crate) fn recording_warnings(
    source: &str,
    undecodable: &[(FrameRef, DecodeError)],
    unfinished: bool,
    instrumented: Option<Instrumented<'_>>,
    unknown_frames: u64,
    warnings: &mut Vec<gpumeter_core::Warning>,
    source_losses: &mut Vec<(LossReason, u64, bool)>,
) {
    for (at, error) in undecodable {
        source_losses.push((LossReason::CorruptFrame, 0, true));
        warnings.push(gpumeter_core::Warning::new(
            gpumeter_core::WarningCode::UndecodableBuffer,
            format!(
                "{source}: {at}: the activity buffer stops decoding ({error}): the records before \
             that were metered, what follows is lost (corrupt_frame, how many is unknown)"
            ),
        ));
    }
    if unfinished {
        warnings.push(gpumeter_core::Warning::new(
            gpumeter_core::WarningCode::UnfinishedRecording,
            format!(
                "{source}: the recording has no end frame (its producer stopped before closing it)"
            ),
        ));
    }
    if let Some(Instrumented { by, pm_sampled }) = instrumented {
        warnings.push(gpumeter_core::Warning::new(
            gpumeter_core::WarningCode::InstrumentedRun,
            format!(
                "{source}: instrumented run (instruction-level collection: {by}): \
                 {}",
                instrumented_meters(pm_sampled)
            ),
        ));
    }
    if unknown_frames > 0 {
        warnings.push(gpumeter_core::Warning::new(
            gpumeter_core::WarningCode::UnknownFrames,
            format!(
                "{source}: {unknown_frames} frames of unknown types were skipped (written by a \
             newer producer?)"
            ),
        ));
    }
}

/// Energy samples (the source's slot, timestamp in ns, counter in mJ) on the meter's slots;
/// a sample of a slot `slot_of` does not map is dropped.
pub(crate) fn on_slots(
    energy: Vec<(DeviceSlot, u64, u64)>,
    slot_of: impl Fn(DeviceSlot) -> Option<DeviceSlot>,
) -> Vec<(DeviceSlot, u64, u64)> {
    energy
        .into_iter()
        .filter_map(|(local, t, e)| Some((slot_of(local)?, t, e)))
        .collect()
}

/// The span a recording observed each device's energy counter over: (slot, first, last
/// timestamp in ns) per slot, in slot order.
pub(crate) fn energy_spans(energy: &[(DeviceSlot, u64, u64)]) -> Vec<(DeviceSlot, u64, u64)> {
    let mut spans: BTreeMap<DeviceSlot, (u64, u64)> = BTreeMap::new();
    for &(slot, t, _) in energy {
        let s = spans.entry(slot).or_insert((t, t));
        *s = (s.0.min(t), s.1.max(t));
    }
    spans.into_iter().map(|(d, (a, b))| (d, a, b)).collect()
}

/// Starts a source on the meter: `false`, with `summary` marked a duplicate that adds
/// nothing (no records, skipped or dropped counted), when the meter has metered it already.
pub(crate) fn begin(meter: &mut Meter, summary: &mut CuptiSummary) -> bool {
    let fresh = meter.begin_source(SourceInfo {
        name: summary.source_name.clone(),
        format: summary.format.as_str().to_string(),
        sha256: summary.sha256.clone(),
    });
    if !fresh {
        summary.duplicate_source = true;
        summary.records = 0;
        summary.skipped = 0;
        summary.dropped = 0;
    }
    fresh
}

/// Registers a source's devices in order, each followed by [`CuptiOptions::on_device`]: the
/// meter's slot of each, by the source's own slot number.
pub(crate) fn register_devices(
    meter: &mut Meter,
    devices: impl IntoIterator<Item = DeviceInfo>,
    opts: &CuptiOptions<'_>,
) -> Vec<DeviceSlot> {
    devices
        .into_iter()
        .map(|info| {
            let slot = meter.register_device(info);
            if let Some(hook) = opts.on_device {
                hook(meter, slot);
            }
            slot
        })
        .collect()
}

/// Registers a source's green contexts (its own slot, context id, SMs): the meter's
/// partition of each by (the source's slot, context id). This source's own context ids, so
/// they never match another process's contexts of the same number.
pub(crate) fn register_partitions(
    meter: &mut Meter,
    partitions: &[(DeviceSlot, u32, u32)],
    slot_of: impl Fn(DeviceSlot) -> Option<DeviceSlot>,
) -> FxHashMap<(DeviceSlot, u32), PartitionId> {
    let mut partition_of = FxHashMap::default();
    for &(local, context, sms) in partitions {
        if let Some(p) = slot_of(local).and_then(|slot| meter.register_partition(slot, sms)) {
            partition_of.insert((local, context), p);
        }
    }
    partition_of
}

/// Records a source's losses (its own slot, reason, count, whether the count is a lower
/// bound) on the meter's slots.
pub(crate) fn record_losses(
    meter: &mut Meter,
    losses: &[(DeviceSlot, LossReason, u64, bool)],
    slot_of: impl Fn(DeviceSlot) -> Option<DeviceSlot>,
) {
    for &(local, reason, n, lower) in losses {
        let Some(slot) = slot_of(local) else { continue };
        if lower {
            meter.record_loss_at_least(slot, reason, n);
        } else {
            meter.record_loss(slot, reason, n);
        }
    }
}

/// The identity under which a report notes how far it read a recording's PM samples
/// (`extensions.recordings`): the recording's own ([`gpumeter_core::Batch::recording`]) with
/// `#pm` after it. PM samples are decoded on their own period (100 ms by default) while
/// activity buffers are flushed on theirs, so at any moment a growing recording holds its
/// records and its samples up to different times: one cut for both would leave out, in the
/// next report of the chain, the records or samples written after the report though they
/// end before that cut, never metered.
pub(crate) fn pm_recording(recording: &str) -> String {
    format!("{recording}#pm")
}

/// A source's PM samples (on the meter's slots, in file order) less those an earlier report
/// of the chain read: for a `.gmr` recording continued from an earlier report (`--opening`),
/// how far this report reads the samples is noted apart from its records
/// ([`pm_recording`]), and the samples the earlier report read (ending at or before the time
/// it read the device's samples to) are left out, counted as billed by the opening report
/// ([`Meter::record_pm_billed_earlier`]).
pub(crate) fn pm_unread(
    meter: &mut Meter,
    pm: Vec<(DeviceSlot, PmSample)>,
    recording: Option<&str>,
) -> Vec<(DeviceSlot, PmSample)> {
    if pm.is_empty() {
        return pm;
    }
    let cont = match recording {
        Some(r) => gpumeter_core::Continuation::begin(
            meter,
            &pm_recording(r),
            pm.iter()
                .map(|(slot, x)| (*slot, x.end_ns.max(x.start_ns)))
                .collect::<Vec<_>>(),
        ),
        None => gpumeter_core::Continuation::default(),
    };
    let n = pm.len();
    let unread: Vec<(DeviceSlot, PmSample)> = pm
        .into_iter()
        .filter(|(slot, x)| !pm_read_earlier(&cont, *slot, x))
        .collect();
    if unread.len() < n {
        meter.record_pm_billed_earlier((n - unread.len()) as u64);
    }
    unread
}

/// Pushes the sources' PM samples (per source: its SHA-256 and its samples from
/// [`pm_unread`]) into the meter ([`Meter::push_pm_sample`]) once every source is announced,
/// before any source's records: a [`Batch`] carries no PM samples, and samples pushed before
/// the records are never `late` (the meter holds them until its sweep passes their end; the
/// whole-file path holds the files in memory anyway). A streamed recording hands them on
/// among its records instead ([`crate::recording_file`]).
///
/// They are pushed in the order the streamed paths hand them on: by start; at equal starts,
/// the source whose SHA-256 sorts first ([`crate::meter_files`]' merge); within a source, the
/// file's order ([`crate::buffer_file::Reorder`]). Of two overlapping samples the meter keeps the one
/// it is handed first, so the files' order would otherwise make the whole-file report differ
/// from the streamed one.
pub(crate) fn push_pm(meter: &mut Meter, sources: Vec<(String, Vec<(DeviceSlot, PmSample)>)>) {
    let mut all: Vec<(u64, &str, usize, DeviceSlot, PmSample)> = Vec::new();
    for (sha, pm) in &sources {
        all.extend(
            pm.iter()
                .enumerate()
                .map(|(i, (slot, x))| (x.start_ns, sha.as_str(), i, *slot, *x)),
        );
    }
    all.sort_unstable_by(|a, b| (a.0, a.1, a.2).cmp(&(b.0, b.1, b.2)));
    for (_, _, _, slot, x) in all {
        meter.push_pm_sample(slot, &x);
    }
}

/// Whether the earlier report of a chain read PM sample `x` of `slot` (it ends at or before
/// the time that report read the device to; a sample with a zero time is never read, the
/// meter refuses it itself).
pub(crate) fn pm_read_earlier(
    cont: &gpumeter_core::Continuation,
    slot: DeviceSlot,
    x: &PmSample,
) -> bool {
    if cont.is_empty() || x.start_ns == 0 {
        return false;
    }
    // The continuation answers for memory events by time: a release at the sample's end.
    cont.read_memory(&MemoryEvent {
        device: slot,
        timestamp_ns: x.end_ns.max(x.start_ns),
        address: 0,
        bytes: 0,
        op: MemoryOp::Release,
        context_id: 0,
        correlation_id: 0,
        process_id: None,
        external_id: None,
    })
}
