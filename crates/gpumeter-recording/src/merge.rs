//! Several raw CUPTI buffer files and `.gmr` recordings metered as streams merged in time
//! order (issue 13): the report of [`meter_files`] is byte for byte the one of reading every
//! file whole and pushing their [`Batch`](gpumeter_core::Batch)es with
//! [`push_batches`](gpumeter_core::push_batches), for every order of the inputs, in memory
//! bounded by the files' reorder widths and the meter's running work, not by their records.
//!
//! Each file is scanned first ([`crate::buffer_file`], [`crate::recording_file`]: validated, hashed, its
//! joins, devices, losses and disorder known), then the sources are announced in argument
//! order as [`push_batches`](gpumeter_core::push_batches)' callers announce them, their
//! recording continuations, losses, skipped counts and energy spans booked in its order, and
//! then every file is replayed at once, each on its own thread through its own reorder
//! buffer, and merged by a k-way merge (a binary heap over the sources' next items) in exactly
//! `push_batches`' order: by time; at equal times work records, then releases and process
//! exits, then allocations; then the source whose SHA-256 sorts first; within a source, its
//! own order. Energy samples follow, source by source.
//!
//! `push_batches` also compares the sources' work per device, to meter once the same GPU's work
//! given twice in new bytes; that needs every record of both sources. The scans keep, per
//! device, the smallest [`SKETCH_DIGESTS`] distinct identity digests of its work
//! ([`gpumeter_core::identity_digest`]): when those show that no device of one source holds
//! any of the [`gpumeter_core::REPEAT_PROBES`] smallest digests of a device of another, the
//! comparison has nothing to find and the files stream; otherwise (the same work in two
//! files, or sketches that cannot tell) [`meter_files`] says so and the caller meters the
//! files whole, as before.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::path::Path;
use std::sync::mpsc;

use crate::source::{read_source, source_name};
use rustc_hash::FxHashMap;

use gpumeter_core::{Continuation, DeviceSlot, MemoryOp, Meter, PartitionId};

use crate::buffer_file::BufferFile;
use crate::recording_file::GmrStream;
use crate::reorder::{refused_item, refused_pm, refused_work, Settle};
use crate::scanned::{Replayed, Sketch, SourceItem, Streamed};
use crate::source::{
    begin, energy_spans, meter_buffer, meter_gmr, on_slots, pm_read_earlier, pm_recording,
    record_losses, register_devices, register_partitions, CuptiFormat, CuptiOptions,
    CuptiSourceError, CuptiSummary,
};

/// How a streamed source replays its items (pass 2).
#[derive(Debug)]
pub(crate) enum Replayer {
    /// A raw buffer file.
    Buffer(Box<BufferFile>),
    /// A well-formed `.gmr` recording.
    Gmr(Box<GmrStream>),
}

impl Replayer {
    fn replay(&self, sink: &mut dyn FnMut(SourceItem)) -> Result<Replayed, CuptiSourceError> {
        match self {
            Replayer::Buffer(b) => {
                let (pids, exts) = b.replay(sink)?;
                Ok(Replayed {
                    pids,
                    exts,
                    ..Replayed::default()
                })
            }
            Replayer::Gmr(g) => g.replay(sink),
        }
    }
}

/// A source announced on the meter.
struct Live<'a> {
    source: &'a Streamed<Replayer>,
    /// The meter's slot of each of the source's slots.
    slots: Vec<DeviceSlot>,
    partition_of: FxHashMap<(DeviceSlot, u32), PartitionId>,
    continuation: Continuation,
    /// How far an earlier report read the recording's PM samples.
    pm_continuation: Continuation,
    /// Records, memory events and PM samples left out as billed by the opening report.
    billed: (u64, u64, u64),
    /// The source's energy samples on the meter's slots, continuation applied.
    energy: Vec<(DeviceSlot, u64, u64)>,
}

impl Live<'_> {
    fn slot_of(&self, local: DeviceSlot) -> Option<DeviceSlot> {
        self.slots.get(local.0 as usize).copied()
    }

    /// `item` on the meter's slots and partitions; `None` when it is not pushed (its device
    /// is not the source's, or the opening report billed it: then counted).
    fn place(&mut self, item: SourceItem) -> Option<SourceItem> {
        match item {
            SourceItem::Work(mut rec) => {
                rec.partition = self
                    .partition_of
                    .get(&(rec.device, rec.context_id))
                    .copied();
                rec.device = self.slot_of(rec.device)?;
                if self.continuation.read_record(&rec) {
                    self.billed.0 += 1;
                    return None;
                }
                Some(SourceItem::Work(rec))
            }
            SourceItem::Memory(mut ev) => {
                ev.device = self.slot_of(ev.device)?;
                if self.continuation.read_memory(&ev) {
                    self.billed.1 += 1;
                    return None;
                }
                Some(SourceItem::Memory(ev))
            }
            SourceItem::Pm(local, x) => {
                let slot = self.slot_of(local)?;
                if pm_read_earlier(&self.pm_continuation, slot, &x) {
                    self.billed.2 += 1;
                    return None;
                }
                Some(SourceItem::Pm(slot, x))
            }
        }
    }
}

/// Pushes one placed item, settling its device every so often ([`Settle`]); a work record
/// the meter refuses whatever its time is pushed without settling (its time says nothing of
/// what may follow).
fn deliver(meter: &mut Meter, settle: &mut Settle, item: SourceItem) {
    match item {
        SourceItem::Work(rec) => {
            if !refused_work(&rec) {
                settle.before(meter, rec.device, rec.start_ns);
            }
            meter.push(rec);
        }
        SourceItem::Memory(ev) => {
            settle.before(meter, ev.device, ev.timestamp_ns);
            meter.push_memory(ev);
        }
        SourceItem::Pm(slot, x) => {
            if !refused_pm(&x) {
                settle.before(meter, slot, x.start_ns);
            }
            meter.push_pm_sample(slot, &x);
        }
    }
}

/// The merge key of an item: its time and class (work 0, releases and process exits 1,
/// allocations 2), as `push_batches` orders them; a PM sample at its start, class 3 (the
/// meter holds a sample until its sweep passes the sample's end, so its place among items of
/// the same time does not change the report).
fn key(item: &SourceItem) -> (u64, u8) {
    match item {
        SourceItem::Work(r) => (r.start_ns, 0),
        SourceItem::Memory(m) => (
            m.timestamp_ns,
            if m.op == MemoryOp::Allocation { 2 } else { 1 },
        ),
        SourceItem::Pm(_, x) => (x.start_ns, 3),
    }
}

/// Whether `push_batches`' comparison of the sources' work per device could find anything
/// among `sources` (module docs): `true` when a device of one source may hold one of the
/// probes of a device of another, or the sketches cannot tell. A source whose SHA-256 an
/// earlier one has is left out (it is metered once, as a duplicate with nothing to push).
fn may_repeat(sources: &[Streamed<Replayer>]) -> bool {
    // Per source, its devices' sketches merged by device key (a device's work is one part).
    let mut parts: Vec<(usize, Sketch)> = Vec::new();
    let mut shas: Vec<&str> = Vec::new();
    for (i, s) in sources.iter().enumerate() {
        if shas.contains(&s.summary.sha256.as_str()) {
            continue;
        }
        shas.push(&s.summary.sha256);
        let mut by_key: BTreeMap<&str, Sketch> = BTreeMap::new();
        for (d, sketch) in s.devices.iter().zip(&s.sketches) {
            by_key.entry(&d.key).or_default().merge(sketch);
        }
        parts.extend(by_key.into_values().map(|k| (i, k)));
    }
    for (i, a) in &parts {
        for (j, b) in &parts {
            if i == j {
                continue;
            }
            if a.probes().any(|d| b.holds(d) != Some(false)) {
                return true;
            }
        }
    }
    false
}

/// Meters the raw buffer files and `.gmr` recordings `inputs` (path, format) as streams
/// merged in time order (module docs): the report `push_batches` of every file read whole
/// gives, byte for byte, in memory flat in the files' sizes. One summary per input, in order.
///
/// `Ok(None)`, with the meter untouched, when a file must be metered whole (a damaged
/// recording, instruction counts) or the sources may repeat one another's work, or an earlier
/// report of the chain read one of the recordings (its continuation changes which work is
/// compared): meter the files with [`crate::meter_sources`] then.
///
/// # Errors
/// As [`crate::meter_buffer_file`] / [`crate::meter_gmr_file`], for the first input that fails
/// its first pass (the meter then untouched); an error of a second pass (a file changed
/// between the passes) leaves what was pushed.
pub fn meter_files(
    meter: &mut Meter,
    inputs: &[(&Path, CuptiFormat)],
    opts: &CuptiOptions<'_>,
) -> Result<Option<Vec<CuptiSummary>>, CuptiSourceError> {
    // Every file opens, or the first that does not is the error (as when they are read whole).
    for (path, _) in inputs {
        std::fs::File::open(path).map_err(|error| CuptiSourceError::Io {
            name: crate::source::source_name(path),
            error,
        })?;
    }
    let sketch = inputs.len() > 1;
    let mut sources = Vec::with_capacity(inputs.len());
    for &(path, format) in inputs {
        let scanned = match format {
            CuptiFormat::Cupti => crate::buffer_file::scan_stream(path, opts, sketch)?
                .map(|s| s.with_replayer(Replayer::Buffer)),
            CuptiFormat::Gmr => crate::recording_file::scan_stream(path, opts, sketch)?
                .map(|s| s.with_replayer(Replayer::Gmr)),
        };
        match scanned {
            Some(s) => sources.push(s),
            None => return Ok(None),
        }
    }
    if sources.len() > 1 {
        let continued = sources.iter().any(|s| {
            s.recording
                .as_deref()
                .is_some_and(|r| meter.continues_recording(r))
        });
        if continued || may_repeat(&sources) {
            return Ok(None);
        }
    }
    meter_streamed(meter, &mut sources, opts).map(Some)
}

/// Meters the raw CUPTI buffer file at `path` as a stream (the `buffer_file` module's docs): the same report as
/// reading it and calling [`meter_buffer`], in memory flat in the file's size. The report
/// names it by its file name.
///
/// # Errors
/// [`CuptiSourceError::Io`] when the file cannot be read, [`CuptiSourceError::Decode`] when it
/// does not decode: then the meter is untouched (the whole file is validated first). An error
/// of the second pass (the file changed between the passes) leaves what was pushed.
pub fn meter_buffer_file(
    meter: &mut Meter,
    path: &Path,
    opts: &CuptiOptions<'_>,
) -> Result<CuptiSummary, CuptiSourceError> {
    let scanned = crate::buffer_file::scan_stream(path, opts, false)?
        .map(|s| s.with_replayer(Replayer::Buffer));
    meter_single(meter, path, opts, scanned, meter_buffer)
}

/// Meters the `.gmr` recording at `path` as a stream (the `recording_file` module's docs): the same report as
/// reading it and calling [`meter_gmr`], in memory flat in the file's size for a
/// well-formed recording; any other is metered by [`meter_gmr`] itself. The report names it
/// by its file name.
///
/// # Errors
/// As [`meter_gmr`] (the file is validated whole before the meter is touched), and
/// [`CuptiSourceError::Io`] when it cannot be read; an error of the second pass (the file
/// changed between the passes) leaves what was pushed.
pub fn meter_gmr_file(
    meter: &mut Meter,
    path: &Path,
    opts: &CuptiOptions<'_>,
) -> Result<CuptiSummary, CuptiSourceError> {
    let scanned = crate::recording_file::scan_stream(path, opts, false)?
        .map(|s| s.with_replayer(Replayer::Gmr));
    meter_single(meter, path, opts, scanned, meter_gmr)
}

/// One file at `path`: `scanned` (its first pass) metered as a stream, or, when the file
/// must be metered whole (`None`), read and handed to `whole` (`meter_buffer`, `meter_gmr`).
pub(crate) fn meter_single(
    meter: &mut Meter,
    path: &Path,
    opts: &CuptiOptions<'_>,
    scanned: Option<Streamed<Replayer>>,
    whole: impl FnOnce(
        &mut Meter,
        &str,
        &[u8],
        &CuptiOptions<'_>,
    ) -> Result<CuptiSummary, CuptiSourceError>,
) -> Result<CuptiSummary, CuptiSourceError> {
    let Some(streamed) = scanned else {
        let (name, bytes) = read_source(path)?;
        return whole(meter, &name, &bytes, opts);
    };
    let mut sources = [streamed];
    let mut summaries = meter_streamed(meter, &mut sources, opts)?;
    summaries.pop().ok_or_else(|| CuptiSourceError::Io {
        name: source_name(path),
        error: std::io::Error::other("no summary"),
    })
}

/// Begins the recordings' continuations (their energy cut where an earlier report ended);
/// returns each live source's energy spans.
fn begin_continuations(
    meter: &mut Meter,
    live: &mut [Option<Live<'_>>],
) -> Vec<Vec<(DeviceSlot, u64, u64)>> {
    let mut spans: Vec<Vec<(DeviceSlot, u64, u64)>> = Vec::with_capacity(live.len());
    for l in live.iter_mut().flatten() {
        let mut sp = energy_spans(&l.energy);
        if let Some(rec) = &l.source.recording {
            let ends: Vec<(DeviceSlot, u64)> = l
                .source
                .ends
                .iter()
                .filter_map(|&(local, t)| Some((l.slot_of(local)?, t)))
                .chain(l.energy.iter().map(|&(slot, t, _)| (slot, t)))
                .collect();
            l.continuation = Continuation::begin(meter, rec, ends);
            l.continuation.cut_energy(&mut l.energy, &mut sp);
            let pm_ends: Vec<(DeviceSlot, u64)> = l
                .source
                .pm_ends
                .iter()
                .filter_map(|&(local, t)| Some((l.slot_of(local)?, t)))
                .collect();
            l.pm_continuation = Continuation::begin(meter, &pm_recording(rec), pm_ends);
        }
        spans.push(sp);
    }
    spans
}

/// Books each live source's losses (on its devices and on the source) and skipped counts.
fn book_losses(meter: &mut Meter, live: &[Option<Live<'_>>]) {
    for l in live.iter().flatten() {
        let slots = &l.slots;
        record_losses(meter, &l.source.losses, |local| {
            slots.get(local.0 as usize).copied()
        });
        let s = &l.source.summary;
        let label = match &l.source.recording {
            Some(r) => gpumeter_core::device::recording_label(r),
            None => gpumeter_core::source_label(&s.sha256),
        };
        for &(reason, n, lower) in &l.source.source_losses {
            meter.record_source_loss(&label, reason, n, lower);
        }
        for (category, n) in &l.source.skipped {
            meter.record_skipped(category, *n);
        }
    }
}

/// Announces `sources` and pushes them merged (module docs); one summary per source.
pub(crate) fn meter_streamed(
    meter: &mut Meter,
    sources: &mut [Streamed<Replayer>],
    opts: &CuptiOptions<'_>,
) -> Result<Vec<CuptiSummary>, CuptiSourceError> {
    // As `announce`, source by source: the source, its devices (the hook applied), warnings,
    // green contexts.
    let mut live: Vec<Option<Live<'_>>> = Vec::with_capacity(sources.len());
    let mut summaries = Vec::with_capacity(sources.len());
    for s in sources.iter_mut() {
        let fresh = begin(meter, &mut s.summary);
        summaries.push(s.summary.clone());
        if !fresh {
            live.push(None);
            continue;
        }
        let slots = register_devices(meter, s.devices.iter().cloned(), opts);
        for w in &s.warnings {
            meter.warn(w.clone());
        }
        let slot_of = |local: DeviceSlot| slots.get(local.0 as usize).copied();
        let partition_of = register_partitions(meter, &s.partitions, slot_of);
        let energy = on_slots(s.energy.clone(), slot_of);
        live.push(Some(Live {
            source: s,
            slots,
            partition_of,
            continuation: Continuation::default(),
            pm_continuation: Continuation::default(),
            billed: (0, 0, 0),
            energy,
        }));
    }
    // As `push_batches`: recordings' continuations, then losses and skipped counts, then
    // energy spans, then the items merged, then energy samples.
    let spans = begin_continuations(meter, &mut live);
    book_losses(meter, &live);
    for sp in &spans {
        for &(slot, from, to) in sp {
            meter.observe_energy_span(slot, from, to);
        }
    }
    let mut order: Vec<usize> = (0..live.len()).filter(|&i| live[i].is_some()).collect();
    let mut settle = Settle::default();
    let replayed = if order.len() == 1 {
        let i = order[0];
        let mut results: Vec<Option<Result<Replayed, CuptiSourceError>>> =
            (0..live.len()).map(|_| None).collect();
        if let Some(l) = live[i].as_mut() {
            let source = l.source;
            let r = source.replayer.replay(&mut |item| {
                if let Some(item) = l.place(item) {
                    deliver(meter, &mut settle, item);
                }
            });
            results[i] = Some(r);
        }
        results
    } else {
        order.sort_by(|&a, &b| {
            let sha = |i: usize| live[i].as_ref().map(|l| l.source.summary.sha256.as_str());
            sha(a).cmp(&sha(b)).then(a.cmp(&b))
        });
        let mut rank = vec![0usize; live.len()];
        for (r, &i) in order.iter().enumerate() {
            rank[i] = r;
        }
        merge(meter, &mut settle, &mut live, &rank)
    };
    let mut first_error = None;
    for (i, r) in replayed.into_iter().enumerate() {
        let (Some(l), Some(r)) = (live[i].as_ref(), r) else {
            continue;
        };
        match r {
            Ok(r) => {
                let s = &mut summaries[i];
                s.process_ids_joined = r.pids;
                s.external_ids_joined = r.exts;
                if let Some(n) = r.memory_events {
                    s.memory_events = n;
                }
                if let Some(n) = r.closed_at_end {
                    s.allocations_closed_at_end = n;
                }
                let _ = l;
            }
            Err(e) => {
                if first_error.is_none() {
                    first_error = Some(e);
                }
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    for l in live.iter().flatten() {
        for &(slot, t, e) in &l.energy {
            meter.push_energy(slot, t, e);
        }
    }
    for l in live.iter().flatten() {
        if l.billed.0 + l.billed.1 > 0 {
            meter.record_billed_earlier(l.billed.0, l.billed.1);
        }
        if l.billed.2 > 0 {
            meter.record_pm_billed_earlier(l.billed.2);
        }
    }
    Ok(summaries)
}

/// Items a replay thread hands the merge at a time.
const BATCH_ITEMS: usize = 1024;

/// One source's items as the merge reads them: batches from its replay thread.
struct Feed {
    rx: mpsc::Receiver<Vec<SourceItem>>,
    back: mpsc::SyncSender<Vec<SourceItem>>,
    /// The current batch, reversed (its next item last).
    current: Vec<SourceItem>,
}

impl Feed {
    fn next(&mut self) -> Option<SourceItem> {
        loop {
            if let Some(item) = self.current.pop() {
                return Some(item);
            }
            let empty = std::mem::take(&mut self.current);
            let _ = self.back.try_send(empty);
            let mut batch = self.rx.recv().ok()?;
            batch.reverse();
            self.current = batch;
        }
    }
}

/// Replays every live source on its own thread and pushes their items merged in
/// `push_batches`' order (module docs; `rank`: each source's place by SHA-256). Returns each
/// source's replay result.
fn merge(
    meter: &mut Meter,
    settle: &mut Settle,
    live: &mut [Option<Live<'_>>],
    rank: &[usize],
) -> Vec<Option<Result<Replayed, CuptiSourceError>>> {
    std::thread::scope(|scope| {
        let mut feeds: Vec<Option<Feed>> = Vec::with_capacity(live.len());
        let mut handles = Vec::with_capacity(live.len());
        for l in live.iter() {
            let Some(l) = l else {
                feeds.push(None);
                handles.push(None);
                continue;
            };
            let source = l.source;
            let (tx, rx) = mpsc::sync_channel::<Vec<SourceItem>>(2);
            let (back, back_rx) = mpsc::sync_channel::<Vec<SourceItem>>(2);
            let name = source.summary.source_name.clone();
            handles.push(Some((
                name,
                scope.spawn(move || {
                    let mut batch = Vec::with_capacity(BATCH_ITEMS);
                    let r = source.replayer.replay(&mut |item| {
                        batch.push(item);
                        if batch.len() >= BATCH_ITEMS {
                            let next = back_rx
                                .try_recv()
                                .unwrap_or_else(|_| Vec::with_capacity(BATCH_ITEMS));
                            let _ = tx.send(std::mem::replace(&mut batch, next));
                        }
                    });
                    if !batch.is_empty() {
                        let _ = tx.send(batch);
                    }
                    r
                }),
            )));
            feeds.push(Some(Feed {
                rx,
                back,
                current: Vec::new(),
            }));
        }
        // The next item of source `i` that goes through the heap: a work record the meter
        // refuses whatever its time is pushed as it comes (its source's reorder buffer hands it
        // on at once too).
        let next = |i: usize,
                    meter: &mut Meter,
                    settle: &mut Settle,
                    feeds: &mut [Option<Feed>],
                    live: &mut [Option<Live<'_>>]|
         -> Option<SourceItem> {
            let feed = feeds.get_mut(i)?.as_mut()?;
            let l = live.get_mut(i)?.as_mut()?;
            loop {
                let item = feed.next()?;
                if let Some(item) = l.place(item) {
                    if refused_item(&item) {
                        deliver(meter, settle, item);
                        continue;
                    }
                    return Some(item);
                }
            }
        };
        let mut heads: Vec<Option<SourceItem>> = vec![None; live.len()];
        let mut heap = BinaryHeap::with_capacity(live.len());
        for i in 0..live.len() {
            if let Some(item) = next(i, meter, settle, &mut feeds, live) {
                let (t, class) = key(&item);
                heap.push(Reverse((t, class, rank[i], i)));
                heads[i] = Some(item);
            }
        }
        while let Some(Reverse((_, _, _, i))) = heap.pop() {
            if let Some(item) = heads.get_mut(i).and_then(Option::take) {
                deliver(meter, settle, item);
            }
            if let Some(item) = next(i, meter, settle, &mut feeds, live) {
                let (t, class) = key(&item);
                heap.push(Reverse((t, class, rank[i], i)));
                heads[i] = Some(item);
            }
        }
        drop(feeds);
        handles
            .into_iter()
            .map(|h| {
                h.map(|(name, h)| {
                    h.join().unwrap_or_else(|_| {
                        Err(CuptiSourceError::Io {
                            name,
                            error: std::io::Error::other("a replay thread panicked"),
                        })
                    })
                })
            })
            .collect()
    })
}
