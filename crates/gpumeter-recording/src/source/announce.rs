//! Committing planned sources to a meter: one alone, or several in memory announced and
//! pushed together (`meter_sources`, `announce_sources`).

use super::*;

/// Hands a plan to the meter: source, devices (hook applied), losses, records.
pub(super) fn commit(meter: &mut Meter, plan: Plan, opts: &CuptiOptions<'_>) -> CuptiSummary {
    let (summary, batch, pm) = announce(meter, plan, opts);
    push_pm(meter, vec![(batch.sha256.clone(), pm)]);
    push_batches(meter, vec![batch]);
    summary
}

/// Announces a plan (source, devices with the hook applied, warnings, skipped, losses,
/// partitions) and returns what it has to push, mapped to the meter's slots and partitions:
/// the batch and the PM samples ([`push_pm`]); an empty batch and no samples for a source
/// already metered.
pub(super) fn announce(
    meter: &mut Meter,
    plan: Plan,
    opts: &CuptiOptions<'_>,
) -> (CuptiSummary, Batch, Vec<(DeviceSlot, PmSample)>) {
    let mut summary = plan.summary;
    if !begin(meter, &mut summary) {
        return (summary, Batch::default(), Vec::new());
    }
    let slots = register_devices(meter, plan.devices, opts);
    let slot_of = |local: DeviceSlot| slots.get(local.0 as usize).copied();
    for w in plan.warnings {
        meter.warn(w);
    }
    let losses: Vec<(DeviceSlot, LossReason, u64, bool)> = plan
        .losses
        .into_iter()
        .filter_map(|(local, reason, n, lower)| Some((slot_of(local)?, reason, n, lower)))
        .collect();
    let partition_of = register_partitions(meter, &plan.partitions, slot_of);
    let records = plan
        .records
        .into_iter()
        .filter_map(|mut rec| {
            rec.partition = partition_of.get(&(rec.device, rec.context_id)).copied();
            rec.device = slot_of(rec.device)?;
            Some(rec)
        })
        .collect();
    let memory = plan
        .memory
        .into_iter()
        .filter_map(|mut m| {
            m.device = slot_of(m.device)?;
            Some(m)
        })
        .collect();
    let energy = on_slots(plan.energy, slot_of);
    let energy_spans = energy_spans(&energy);
    let pm = plan
        .pm
        .into_iter()
        .filter_map(|(local, x)| Some((slot_of(local)?, x)));
    let pm = pm_unread(meter, pm.collect(), plan.recording.as_deref());
    let batch = Batch {
        sha256: summary.sha256.clone(),
        name: summary.source_name.clone(),
        records,
        memory,
        energy,
        energy_spans,
        losses,
        source_losses: plan.source_losses,
        recording: plan.recording,
        skipped: plan
            .skipped
            .into_iter()
            .map(|(cat, n)| (cat.to_string(), n))
            .collect(),
    };
    (summary, batch, pm)
}

/// One CUPTI source for [`meter_sources`]: a `.gmr` recording or a raw activity buffer.
#[derive(Debug, Clone, Copy)]
pub struct CuptiInput<'a> {
    /// The source's name in the report and in errors (a file name, no directories).
    pub name: &'a str,
    /// Its bytes.
    pub bytes: &'a [u8],
    /// `Gmr`, or `Cupti` for a raw buffer laid out by [`CuptiOptions::api`].
    pub format: CuptiFormat,
}

/// Meters several CUPTI sources as one: every source is read, decoded and validated first
/// (an error leaves the meter untouched), then each is announced in order and their records
/// and memory events are pushed merged in time order, so the order of the inputs does not
/// matter and one recording never makes another's records `late` (e.g. the recordings of the
/// processes of one job on one GPU). One summary per input, in order.
///
/// # Errors
/// As [`meter_gmr`] / [`meter_buffer`], for the first input that fails.
pub fn meter_sources(
    meter: &mut Meter,
    inputs: &[CuptiInput<'_>],
    opts: &CuptiOptions<'_>,
) -> Result<Vec<CuptiSummary>, CuptiSourceError> {
    let (summaries, batches) = announce_sources(meter, inputs, opts)?;
    push_batches(meter, batches);
    Ok(summaries)
}

/// [`meter_sources`] without the pushing: every input is validated (an error leaves the meter
/// untouched), then announced, and its records, memory events and energy samples are returned
/// as [`Batch`]es for [`push_batches`], to be merged with other formats' batches (the facade
/// merges Kineto and Nsight inputs with recordings this way). One summary per input.
///
/// # Errors
/// As [`meter_sources`].
pub fn announce_sources(
    meter: &mut Meter,
    inputs: &[CuptiInput<'_>],
    opts: &CuptiOptions<'_>,
) -> Result<(Vec<CuptiSummary>, Vec<Batch>), CuptiSourceError> {
    let mut plans = Vec::with_capacity(inputs.len());
    for input in inputs {
        plans.push(match input.format {
            CuptiFormat::Gmr => plan_gmr(input.name, input.bytes, opts)?,
            CuptiFormat::Cupti => plan_buffer(input.name, input.bytes, opts)?,
        });
    }
    let mut summaries = Vec::with_capacity(plans.len());
    let mut batches = Vec::with_capacity(plans.len());
    let mut pm = Vec::new();
    for plan in plans {
        let (summary, batch, samples) = announce(meter, plan, opts);
        pm.push((batch.sha256.clone(), samples));
        batches.push(batch);
        summaries.push(summary);
    }
    push_pm(meter, pm);
    Ok((summaries, batches))
}
