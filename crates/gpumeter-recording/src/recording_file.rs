//! Metering a `.gmr` recording file as a stream (issue 13), as [`crate::buffer_file`] meters a raw
//! buffer: two passes over the file read in chunks, frame by frame, the SHA-256 computed by
//! the reading thread of the first, the records handed to the meter in the whole-file path's
//! order through a reorder buffer as wide as the file's disorder.
//!
//! Only well-formed recordings stream: a file whose every frame reads whole (checksum right,
//! payload parses) after a valid header, with or without an end frame, and without
//! instruction counts (SASS-metrics frames or INSTRUCTION_EXECUTION records, whose split among
//! a launch's kernels needs all of them) or operation counters (type-10 frames, joined to their
//! kernels by correlation id over the whole recording). PM samples (type-9 frames) are replayed in file
//! order among the records, each at its start (their disorder counts in the reorder buffer's
//! width), so the meter holds only the samples its sweep has not passed. Anything else — a torn or corrupt frame, data after
//! the end frame, a second header, a malformed payload, an unsupported version — is metered by
//! the whole-file path ([`meter_gmr`]), which reports, resynchronizes and books the damage:
//! those files are the exception, and their error messages stay exactly as they were.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use gpumeter_core::{identity_digest, DeviceSlot, LossReason, MemoryEvent, MemoryOp};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::chunks::{with_chunks, Chunks, FileStamp};
use crate::gmr::{
    cut, parse_payload, Cut, DroppedRecords, Frame, GmrFile, GmrHeader, LocatedFrame,
    FRAME_OVERHEAD, GMR_FORMAT_VERSION, GMR_MAGIC, GMR_PREAMBLE_LEN, T_BUFFER, T_END, T_HEADER,
    T_INSTRUCTIONS, T_OP_COUNTS, T_PM_SAMPLES,
};
use crate::lookahead::JoinDistance;
use crate::reorder::{refused_pm, refused_work};
use crate::scanned::{Sketch, Streamed};
use crate::source::{
    note_invalid, recording_warnings, source_name, CuptiFormat, CuptiOptions, CuptiSourceError,
    CuptiSummary, Devices, FrameRef,
};
use gpumeter_cupti::decode::count_skipped;
use gpumeter_cupti::decode::{DecodeError, LocatedRecord, Walk};
use gpumeter_cupti::join::{convert, correlation_named, intern_name, Converted, Joins};
use gpumeter_cupti::layout::ApiVersion;

mod replay;

/// Calls `each` for every whole frame after the header of the `.gmr` read by `chunks` (`len`
/// bytes): its place, type and payload; `each` returns `false` to stop. Returns the header and
/// whether the file has an end frame, or `None` when the file is not a well-formed recording
/// (module docs) or `each` stopped: then the whole-file path meters it.
fn frames(
    chunks: &mut Chunks<'_>,
    len: u64,
    mut each: impl FnMut(&GmrHeader, FrameRef, u32, &[u8]) -> bool,
) -> std::io::Result<Option<(GmrHeader, bool)>> {
    if !chunks.ensure(GMR_PREAMBLE_LEN)? {
        return Ok(None);
    }
    let rest = chunks.rest();
    let version = rest
        .get(16..20)
        .map(|v| u32::from_le_bytes([v[0], v[1], v[2], v[3]]));
    if rest.get(..16) != Some(&GMR_MAGIC[..]) || version != Some(GMR_FORMAT_VERSION) {
        return Ok(None);
    }
    chunks.consume(GMR_PREAMBLE_LEN);
    let mut header: Option<GmrHeader> = None;
    let (mut index, mut finished) = (0usize, false);
    while chunks.ensure(1)? {
        let offset = chunks.offset();
        if finished || !chunks.ensure(12)? {
            return Ok(None);
        }
        let r = chunks.rest();
        let size = r
            .get(4..12)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes)
            .and_then(|n| n.checked_add(FRAME_OVERHEAD as u64));
        // A frame longer than the rest of the file is torn: not read into memory here.
        let Some(size) = size.filter(|&n| n <= len.saturating_sub(offset as u64)) else {
            return Ok(None);
        };
        let Ok(size) = usize::try_from(size) else {
            return Ok(None);
        };
        if !chunks.ensure(size)? {
            return Ok(None);
        }
        let next = match cut(chunks.rest(), 0) {
            Cut::Whole {
                frame_type,
                payload,
                next,
            } => {
                match &header {
                    None if frame_type == T_HEADER => match serde_json::from_slice(payload) {
                        Ok(h) => header = Some(h),
                        Err(_) => return Ok(None),
                    },
                    None => return Ok(None),
                    Some(h) => {
                        index += 1;
                        if frame_type == T_END {
                            finished = true;
                        } else if frame_type == T_HEADER {
                            return Ok(None);
                        } else {
                            let at = FrameRef {
                                index,
                                offset: offset as u64,
                            };
                            if !each(h, at, frame_type, payload) {
                                return Ok(None);
                            }
                        }
                    }
                }
                next
            }
            _ => return Ok(None),
        };
        chunks.consume(next);
    }
    Ok(header.map(|h| (h, finished)))
}

/// What the first pass learned of a well-formed recording.
#[derive(Debug)]
struct Scanned {
    /// The file's length and modification time when pass 1 opened it; both passes read only
    /// that many bytes.
    stamp: FileStamp,
    name: String,
    sha256: String,
    header: GmrHeader,
    api: ApiVersion,
    finished: bool,
    /// The facts of records that are not work; the process and external ids by correlation
    /// id only when `join_distance` is `None`.
    joins: Joins,
    /// The recording's join distance in records ([`crate::lookahead`]), `None` past the cap:
    /// then `joins` holds every process and external id, learned by a pass of their own.
    join_distance: Option<u64>,
    /// Device ids in order of first activity.
    order: Vec<u32>,
    skipped: BTreeMap<&'static str, u64>,
    invalid: BTreeMap<u32, u64>,
    faults: BTreeMap<&'static str, (u64, String)>,
    records: u64,
    memory_events: u64,
    /// Per device id: the latest time of its records (end, or start when later) and memory
    /// events, for the report's `extensions.recordings`.
    ends: BTreeMap<u32, u64>,
    /// The latest end of a valid work record or time of a memory event: a finished
    /// recording's end.
    end: u64,
    latest: u64,
    displacement: u64,
    buffers: u64,
    dropped: Vec<DroppedRecords>,
    energy_frames: Vec<LocatedFrame>,
    /// PM-sample frames: (device id, samples) in file order.
    pm_frames: Vec<(u32, u64)>,
    /// Per device id, the latest end (or start when later) of its PM samples.
    pm_ends: BTreeMap<u32, u64>,
    attribution_events: u64,
    unknown_frames: u64,
    undecodable: Vec<(FrameRef, DecodeError)>,
    /// Per device id, the sketch of its work (when asked for, `merge::meter_files`).
    sketches: FxHashMap<u32, Sketch>,
}

impl Scanned {
    /// Nothing read yet of the recording `name` whose length and identity `stamp` holds.
    fn new(stamp: FileStamp, name: String) -> Scanned {
        Scanned {
            stamp,
            name,
            sha256: String::new(),
            header: GmrHeader::default(),
            api: ApiVersion::default(),
            finished: false,
            joins: Joins::default(),
            join_distance: None,
            order: Vec::new(),
            skipped: BTreeMap::new(),
            invalid: BTreeMap::new(),
            faults: BTreeMap::new(),
            records: 0,
            memory_events: 0,
            ends: BTreeMap::new(),
            end: 0,
            latest: 0,
            displacement: 0,
            buffers: 0,
            dropped: Vec::new(),
            energy_frames: Vec::new(),
            pm_frames: Vec::new(),
            pm_ends: BTreeMap::new(),
            attribution_events: 0,
            unknown_frames: 0,
            undecodable: Vec::new(),
            sketches: FxHashMap::default(),
        }
    }
}

/// Pass 1 of a type-9 frame (PM samples): their device and count, the latest end per device,
/// and their disorder (each is replayed at its start). `false` when it does not parse (the
/// recording goes by the whole-file path).
fn scan_pm_frame(s: &mut Scanned, frame_type: u32, payload: &[u8]) -> bool {
    match parse_payload(frame_type, payload) {
        Ok(Some(Frame::PmSamples(p))) => {
            s.pm_frames.push((p.device_id, p.samples.len() as u64));
            for x in &p.samples {
                let e = s.pm_ends.entry(p.device_id).or_insert(0);
                *e = (*e).max(x.end_ns.max(x.start_ns));
                // Replayed at its start (`replay`), unless the meter refuses it
                // whatever its time.
                if !refused_pm(x) {
                    s.latest = s.latest.max(x.start_ns);
                    s.displacement = s.displacement.max(s.latest - x.start_ns);
                }
            }
            true
        }
        _ => false,
    }
}

/// Pass 1 of a frame that is neither an activity buffer nor PM samples: string tables, dropped
/// counts, attribution events and energy samples are kept; `false` for a frame the whole-file
/// path must meter (or one that does not parse).
fn scan_other_frame(
    s: &mut Scanned,
    strings: &mut crate::gmr::StringTable,
    at: FrameRef,
    frame_type: u32,
    payload: &[u8],
) -> bool {
    match parse_payload(frame_type, payload) {
        Ok(Some(Frame::StringTable(t))) => {
            strings.extend_from(&t);
            true
        }
        Ok(Some(Frame::Dropped(d))) => {
            s.dropped.push(d);
            true
        }
        Ok(Some(Frame::Attribution(_))) => {
            s.attribution_events += 1;
            true
        }
        Ok(Some(frame @ Frame::Energy(_))) => {
            s.energy_frames.push(LocatedFrame {
                offset: at.offset,
                index: at.index,
                frame,
            });
            true
        }
        // PM samples (and any other frame) go by the whole-file path.
        Ok(Some(_)) => false,
        Ok(None) => {
            s.unknown_frames += 1;
            true
        }
        Err(_) => false,
    }
}

/// Pass 1: `None` when the whole-file path must meter the file.
fn scan(
    path: &Path,
    opts: &CuptiOptions<'_>,
    sketch: bool,
) -> Result<Option<Scanned>, CuptiSourceError> {
    let name = source_name(path);
    let io = |error| CuptiSourceError::Io {
        name: name.clone(),
        error,
    };
    let file = File::open(path).map_err(io)?;
    let stamp = FileStamp::of(&file).map_err(io)?;
    let len = stamp.len();
    let mut strings = opts.string_table();
    let mut names: FxHashMap<u64, Arc<str>> = FxHashMap::default();
    let none = Joins::default();
    let no_joins = none.joins_ref(None);
    let mut seen: FxHashSet<u32> = FxHashSet::default();
    let mut s = Scanned::new(stamp, name.clone());
    let mut api: Option<ApiVersion> = None;
    let mut distance = JoinDistance::default();
    // Only the `len` bytes there were at the start: a recording still being written is
    // hashed and metered up to where it was.
    let (framed, digest) = with_chunks(std::io::Read::take(file, len), true, |chunks| {
        frames(chunks, len, |h, at, frame_type, payload| {
            let api = match api {
                Some(a) => a,
                None => match ApiVersion::from_cupti(h.cupti_api_version) {
                    Ok(a) => *api.insert(a),
                    Err(_) => return false,
                },
            };
            match frame_type {
                T_BUFFER => {
                    s.buffers += 1;
                    names.clear();
                    for r in Walk::new(payload, api) {
                        let r = match r {
                            Ok(r) => r,
                            Err(e) => {
                                s.undecodable.push((at, e));
                                break;
                            }
                        };
                        intern_name(&r.record, &strings, &mut names);
                        count_skipped(&r.record, &mut s.skipped);
                        // The process and external ids are learned in the replay's window,
                        // or by a pass of their own past the cap (below).
                        if !matches!(distance.record(&r.record), Some((_, true))) {
                            s.joins.learn(std::slice::from_ref(&r), &names);
                        }
                        let converted = convert(&r, &names, &no_joins);
                        scan_record(&mut s, &mut seen, converted, (at, &r), sketch);
                    }
                    true
                }
                // Joined over the whole recording: metered by the whole-file path.
                T_INSTRUCTIONS | T_OP_COUNTS => false,
                T_PM_SAMPLES => scan_pm_frame(&mut s, frame_type, payload),
                _ => scan_other_frame(&mut s, &mut strings, at, frame_type, payload),
            }
        })
    });
    let Some((header, finished)) = framed.map_err(io)? else {
        return Ok(None);
    };
    if !s.joins.instructions_of.is_empty() {
        return Ok(None);
    }
    let Some(digest) = digest else {
        return Ok(None);
    };
    s.api = match api {
        Some(a) => a,
        None => match ApiVersion::from_cupti(header.cupti_api_version) {
            Ok(a) => a,
            Err(_) => return Ok(None),
        },
    };
    s.join_distance = distance.finish();
    drop(distance);
    if s.join_distance.is_none()
        && !learn_correlations(path, s.api, stamp, &mut s.joins).map_err(io)?
    {
        return Ok(None);
    }
    s.sha256 = hex::encode(digest);
    s.header = header;
    s.finished = finished;
    Ok(Some(s))
}

/// Pass 1's account of one record of the frame at `at`, `converted` without joins: its
/// device in first-seen order (`seen`) with its latest time, its identity in the device's
/// sketch, the file's disorder and end, and its count or the reason it is not metered.
fn scan_record(
    s: &mut Scanned,
    seen: &mut FxHashSet<u32>,
    converted: Converted,
    (at, r): (FrameRef, &LocatedRecord),
    sketch: bool,
) {
    let mut note = |id: u32, t: u64, s: &mut Scanned| {
        if seen.insert(id) {
            s.order.push(id);
        }
        let e = s.ends.entry(id).or_insert(t);
        *e = (*e).max(t);
    };
    match converted {
        Converted::Work { device_id, rec, .. } => {
            note(device_id, rec.end_ns.max(rec.start_ns), s);
            if sketch {
                let d = identity_digest(&rec.identity());
                s.sketches.entry(device_id).or_default().add(d);
            }
            // A record the meter refuses whatever its time is handed
            // on at once in pass 2 (`Reorder::push`): not disorder.
            if !refused_work(&rec) {
                s.latest = s.latest.max(rec.start_ns);
                s.displacement = s.displacement.max(s.latest - rec.start_ns);
                s.end = s.end.max(rec.end_ns);
            }
            s.records += 1;
        }
        Converted::Memory { device_id, ev } => {
            let t = ev.timestamp_ns;
            note(device_id, t, s);
            if sketch {
                let d = identity_digest(&ev.identity());
                s.sketches.entry(device_id).or_default().add(d);
            }
            s.latest = s.latest.max(t);
            s.displacement = s.displacement.max(s.latest - t);
            s.end = s.end.max(t);
            s.memory_events += 1;
        }
        Converted::Skipped(cat) => *s.skipped.entry(cat).or_insert(0) += 1,
        Converted::Invalid(bad) => {
            let (invalid, faults) = (&mut s.invalid, &mut s.faults);
            note_invalid(invalid, faults, &s.name, Some(at), r, bad);
            if seen.insert(bad.device_id) {
                s.order.push(bad.device_id);
            }
        }
        Converted::Consumed => {}
    }
}

/// The pass of a recording whose join distance is past the cap ([`crate::lookahead`]): reads
/// the recording at `path` once more (the length `stamp` saw) and learns every process and
/// external id by correlation id into `joins`, as the whole-file path does. `false` when it no
/// longer reads as a well-formed recording (it changed since pass 1).
fn learn_correlations(
    path: &Path,
    api: ApiVersion,
    stamp: FileStamp,
    joins: &mut Joins,
) -> std::io::Result<bool> {
    let file = File::open(path)?;
    stamp.check_prefix(FileStamp::of(&file))?;
    let len = stamp.len();
    let names = FxHashMap::default();
    let (framed, _) = with_chunks(std::io::Read::take(file, len), false, |chunks| {
        frames(chunks, len, |_, _, frame_type, payload| {
            if frame_type == T_BUFFER {
                for r in Walk::new(payload, api) {
                    let Ok(r) = r else { break };
                    if matches!(correlation_named(&r.record), Some((_, true))) {
                        joins.learn(std::slice::from_ref(&r), &names);
                    }
                }
            }
            true
        })
    });
    let complete = framed?.is_some();
    stamp.check_prefix(FileStamp::at(path))?;
    Ok(complete)
}

/// A well-formed recording scanned (pass 1), ready to replay its items (pass 2).
#[derive(Debug)]
pub(crate) struct GmrStream {
    s: Scanned,
    path: std::path::PathBuf,
    /// The source's slot of each device id.
    index: FxHashMap<u32, DeviceSlot>,
    default_pid: Option<u32>,
    /// Devices (slots `0..exit_devices`) that get process exits at a finished recording's end.
    exit_devices: usize,
    /// The names known before the recording's own string tables ([`CuptiOptions::strings`]).
    strings: crate::gmr::StringTable,
}

/// The recording's energy samples through its recorded telemetry (the recorded
/// implementation of the NVML telemetry trait), as the whole-file path reads them: (CUDA
/// ordinal, ns, cumulative mJ).
fn recorded_energy(s: &Scanned) -> Vec<(u32, u64, u64)> {
    let mut samples: Vec<(u32, u64, u64)> = Vec::new();
    use gpumeter_nvml::Telemetry as _;
    let telemetry = GmrFile {
        header: s.header.clone(),
        frames: s.energy_frames.clone(),
        unknown_frames: 0,
        finished: s.finished,
        torn: None,
        damaged: Vec::new(),
    }
    .telemetry();
    for gpu in telemetry.gpus().unwrap_or_default() {
        while let Ok(r) = telemetry.energy(gpu.index) {
            samples.push((r.index, r.timestamp_ns, r.energy_mj));
        }
    }
    samples
}

/// The summary of a streamed recording as pass 1 knows it (memory events are counted as
/// they are pushed).
fn stream_summary(
    s: &Scanned,
    invalid_records: u64,
    dropped_total: u64,
    devices: &[gpumeter_core::DeviceInfo],
    partitions: &[(DeviceSlot, u32, u32)],
) -> CuptiSummary {
    CuptiSummary {
        source_name: s.name.clone(),
        format: CuptiFormat::Gmr,
        api: s.api,
        records: s.records + invalid_records,
        skipped: s.skipped.values().sum(),
        duplicate_source: false,
        sha256: s.sha256.clone(),
        device_keys: devices.iter().map(|d| d.key.clone()).collect(),
        process_ids_joined: 0,
        external_ids_joined: 0,
        dropped: dropped_total,
        buffers: s.buffers,
        energy_samples: s.energy_frames.len() as u64,
        pm_samples: s.pm_frames.iter().map(|&(_, n)| n).sum(),
        // Counted as pushed, process exits at the end included (as `close_at_end` adds them).
        memory_events: 0,
        green_contexts: partitions.len() as u64,
        kernels_with_instructions: 0,
        kernels_with_op_counts: 0,
        allocations_closed_at_end: 0,
        attribution_events: s.attribution_events,
        unknown_frames: s.unknown_frames,
        torn: None,
        finished: s.finished,
    }
}

/// The sketch of each slot's work (pass 1 kept them by CUDA ordinal), with the process exits
/// at a finished recording's end.
fn slot_sketches(
    s: &mut Scanned,
    index: &FxHashMap<u32, DeviceSlot>,
    devices: usize,
    exit_devices: usize,
) -> Vec<Sketch> {
    let mut sketches = vec![Sketch::default(); devices];
    for (id, k) in std::mem::take(&mut s.sketches) {
        if let Some(k0) = index.get(&id).and_then(|l| sketches.get_mut(l.0 as usize)) {
            *k0 = k;
        }
    }
    // The process exits at the end (their identity has no process id: one per device).
    let exit = MemoryEvent::new(DeviceSlot(0), s.end, 0, 0, MemoryOp::ProcessExit);
    let d = identity_digest(&exit.identity());
    for k in sketches.iter_mut().take(exit_devices) {
        k.add(d);
    }
    sketches
}

/// Pass 1 over the `.gmr` at `path` as a source for [`crate::merge`] (module docs), with the
/// sketches of its devices' work when `sketch` is set; `None` when the whole-file path must
/// meter it.
pub(crate) fn scan_stream(
    path: &Path,
    opts: &CuptiOptions<'_>,
    sketch: bool,
) -> Result<Option<Streamed<Box<GmrStream>>>, CuptiSourceError> {
    let Some(mut s) = scan(path, opts, sketch)? else {
        return Ok(None);
    };
    let h = &s.header;
    let recording = format!(
        "{}/{}/{}/{}",
        h.host, h.process_id, h.clock.cupti_timestamp_ns, h.clock.unix_time_ns
    );
    let default_pid = (h.process_id != 0).then_some(h.process_id);
    // Keys of devices without a UUID come from the recording's header identity, which stays
    // the same while it grows (docs/ARCHITECTURE.md, "Invariants" and "Documents").
    let key_label = gpumeter_core::device::recording_label(&recording);
    let mut devs = Devices {
        source: &key_label,
        inventory: &h.devices,
        device_recs: &s.joins.device_recs,
        devices: Vec::new(),
        index: FxHashMap::default(),
    };
    for &id in &s.order {
        devs.slot(id);
    }
    // From here as `Input::plan` orders it, so that devices get the same slots.
    let mut warnings: Vec<gpumeter_core::Warning> = s
        .faults
        .values()
        .map(|(n, first)| gpumeter_core::invalid_field_warning(first, *n))
        .collect();
    let invalid_records: u64 = s.invalid.values().sum();
    let mut losses: Vec<(DeviceSlot, LossReason, u64, bool)> = s
        .invalid
        .iter()
        .map(|(&id, &n)| (devs.slot(id), LossReason::InvalidField, n, false))
        .collect();
    let mut source_losses: Vec<(LossReason, u64, bool)> = Vec::new();
    let dropped_total = devs.book_dropped(
        &s.dropped,
        &s.joins.device_of_context,
        &s.name,
        &mut warnings,
        &mut losses,
        &mut source_losses,
    );
    recording_warnings(
        &s.name,
        &s.undecodable,
        !s.finished,
        h.instrumented.then_some(crate::source::Instrumented {
            by: "SASS metrics",
            pm_sampled: s.pm_frames.iter().any(|&(_, n)| n > 0),
        }),
        s.unknown_frames,
        &mut warnings,
        &mut source_losses,
    );
    // A finished recording's end: one process exit per device known so far and process id.
    let exit_devices = if s.finished && s.end != 0 {
        devs.devices.len()
    } else {
        0
    };
    // Energy, through the recorded telemetry as the whole-file path reads it.
    let samples = recorded_energy(&s);
    let energy = devs.place_energy(samples, &s.name, &mut warnings);
    devs.place_pm_devices(&s.pm_frames, &s.name, &mut warnings);
    let partitions = devs.partitions(&s.joins.green);
    let Devices { devices, index, .. } = devs;
    let summary = stream_summary(&s, invalid_records, dropped_total, &devices, &partitions);
    // How far the recording goes on each of its slots, for its continuation: its records and
    // memory events, and the process exits at a finished recording's end.
    let mut ends: Vec<(DeviceSlot, u64)> = s
        .ends
        .iter()
        .filter_map(|(id, &t)| Some((*index.get(id)?, t)))
        .collect();
    ends.extend((0..exit_devices).map(|d| (DeviceSlot(d as u32), s.end)));
    // Its PM samples', apart (`source::pm_recording`), as the whole-file path notes them.
    let pm_ends: Vec<(DeviceSlot, u64)> = s
        .pm_ends
        .iter()
        .filter_map(|(id, &t)| Some((*index.get(id)?, t)))
        .collect();
    let sketches = if sketch {
        slot_sketches(&mut s, &index, devices.len(), exit_devices)
    } else {
        vec![Sketch::default(); devices.len()]
    };
    let skipped = std::mem::take(&mut s.skipped);
    Ok(Some(Streamed {
        summary,
        devices,
        warnings,
        partitions,
        losses,
        source_losses,
        skipped,
        energy,
        recording: Some(recording),
        ends,
        pm_ends,
        sketches,
        replayer: Box::new(GmrStream {
            s,
            path: path.to_path_buf(),
            index,
            default_pid,
            exit_devices,
            strings: opts.string_table(),
        }),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gmr::{GmrDevice, GmrWriter, PmSamples};
    use crate::scanned::SourceItem;
    use gpumeter_core::PmSample;
    use gpumeter_cupti::kind::ActivityKind;

    const T: u64 = 1_752_826_085_000_000_000;

    /// One CUPTI 12.8 record of `kind` with `fields` (layout field name, value).
    fn record(kind: ActivityKind, fields: &[(&str, i128)]) -> Vec<u8> {
        let layouts = ApiVersion::Cupti12_8.layouts();
        let Some(layout) = layouts.iter().find(|l| l.kind == kind) else {
            panic!("no layout of {kind}");
        };
        let mut b = vec![0u8; layout.size];
        b[..4].copy_from_slice(&kind.0.to_le_bytes());
        for &(name, v) in fields {
            let Some(f) = layout.fields.iter().find(|f| f.name == name) else {
                panic!("no field {name}");
            };
            b[f.offset..f.offset + f.width].copy_from_slice(&v.to_le_bytes()[..f.width]);
        }
        b
    }

    /// One kernel record of device 0 over [start, start + 1000), launched by correlation id
    /// `corr`.
    fn kernel_of(start: u64, corr: u32) -> Vec<u8> {
        let start = i128::from(start);
        record(
            ActivityKind::CONCURRENT_KERNEL,
            &[
                ("start", start),
                ("end", start + 1000),
                ("gridX", 1),
                ("gridY", 1),
                ("gridZ", 1),
                ("blockX", 128),
                ("blockY", 1),
                ("blockZ", 1),
                ("contextId", 1),
                ("correlationId", corr.into()),
            ],
        )
    }

    fn kernel(start: u64) -> Vec<u8> {
        kernel_of(start, 0)
    }

    fn pm(device_id: u32, start: u64) -> PmSamples {
        PmSamples {
            device_id,
            samples: vec![PmSample {
                start_ns: start,
                end_ns: start + 1000,
                sm_active_cycles: Some(1),
                sm_elapsed_cycles: Some(1),
                dram_read_bytes: None,
                dram_write_bytes: None,
                overflow: false,
            }],
        }
    }

    /// A recording with PM-sample frames streams: its samples are handed on among its records
    /// in time order, each at its start, a sample written after a later record included (the
    /// reorder buffer is as wide as the samples' disorder); a sample of a device the recording
    /// does not describe is not handed on, and the summary counts every sample.
    #[test]
    fn pm_samples_stream_in_time_order_among_the_records() {
        let header = GmrHeader {
            cupti_api_version: 26,
            process_id: 7,
            devices: vec![GmrDevice {
                id: 0,
                sm_count: Some(132),
                ..GmrDevice::default()
            }],
            ..GmrHeader::default()
        };
        // Without API records (no lookahead window), and with a runtime API record whose
        // kernel comes records later (a window: the samples wait behind the records before
        // them).
        for api_record in [false, true] {
            let runtime = record(
                ActivityKind::RUNTIME,
                &[("correlationId", 9), ("processId", 42), ("start", T.into())],
            );
            let first = if api_record {
                [runtime, kernel(T)].concat()
            } else {
                kernel(T)
            };
            let last = if api_record {
                [kernel(T + 5000), kernel_of(T + 6000, 9)].concat()
            } else {
                kernel(T + 5000)
            };
            check_stream(&header, &first, &last, api_record);
        }
    }

    fn check_stream(header: &GmrHeader, first: &[u8], last: &[u8], api_record: bool) {
        let run = || -> Result<Vec<u8>, crate::gmr::GmrError> {
            let mut w = GmrWriter::new(Vec::new(), header)?;
            w.write_buffer(first)?;
            // Decoded later than the kernel it precedes.
            w.write_pm_samples(&pm(0, T - 500))?;
            w.write_buffer(&kernel(T + 2000))?;
            w.write_pm_samples(&pm(0, T + 1000))?;
            w.write_pm_samples(&pm(3, T + 1500))?;
            w.write_buffer(last)?;
            w.finish()
        };
        let bytes = match run() {
            Ok(b) => b,
            Err(e) => panic!("{e}"),
        };
        let dir = match tempfile::tempdir() {
            Ok(d) => d,
            Err(e) => panic!("{e}"),
        };
        let path = dir.path().join("pm.gmr");
        if let Err(e) = std::fs::write(&path, &bytes) {
            panic!("{e}");
        }
        let streamed = match scan_stream(&path, &CuptiOptions::default(), false) {
            Ok(Some(s)) => s,
            Ok(None) => panic!("a recording with PM frames does not stream"),
            Err(e) => panic!("{e}"),
        };
        assert_eq!(streamed.summary.pm_samples, 3);
        assert_eq!(streamed.devices.len(), 1);
        assert!(streamed
            .warnings
            .iter()
            .any(|w| w.contains("1 PM samples name a device")));
        let g = &streamed.replayer;
        let mut got = Vec::new();
        if let Err(e) = g.replay(&mut |item| {
            got.push(match item {
                SourceItem::Work(r) => ("work", r.start_ns),
                SourceItem::Memory(m) => ("memory", m.timestamp_ns),
                SourceItem::Pm(slot, x) => {
                    assert_eq!(slot, DeviceSlot(0));
                    ("pm", x.start_ns)
                }
            })
        }) {
            panic!("{e}");
        }
        let got: Vec<(&str, u64)> = got.into_iter().filter(|(k, _)| *k != "memory").collect();
        let mut want = vec![
            ("pm", T - 500),
            ("work", T),
            ("pm", T + 1000),
            ("work", T + 2000),
            ("work", T + 5000),
        ];
        if api_record {
            want.push(("work", T + 6000));
        }
        assert_eq!(got, want);
        let GmrStream { s, .. } = &**g;
        assert_eq!(s.join_distance.is_some_and(|d| d > 0), api_record);
    }
}
