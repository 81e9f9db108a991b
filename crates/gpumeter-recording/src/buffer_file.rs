//! Metering a raw CUPTI activity buffer file as a stream (issue 13): memory flat in the file's
//! size, the file read in chunks, never held whole, and no `Vec` of its records.
//!
//! [`meter_buffer`](crate::meter_buffer) decodes a buffer whole, joins, sorts and pushes; on a
//! file of 10 M records that is ≈ 330 bytes per record on top of the file. [`BufferFile`] does
//! the same work in two passes over the file, each a sequential read in chunks of
//! [`CHUNK_BYTES`](crate::CHUNK_BYTES):
//!
//! 1. **Scan** ([`BufferFile::scan`]): every record is decoded and validated (a fault is an
//!    error before any meter is touched, as for `meter_buffer`), the joins are learned (API,
//!    EXTERNAL_CORRELATION, DEVICE, CONTEXT records may come after the work they describe; of
//!    the process and external ids by correlation id only how far apart their records stand,
//!    [`crate::lookahead`], unless that is past the cap: then they are learned whole by one
//!    more read), the devices are listed in order of first activity, losses and skipped kinds
//!    are counted, and the SHA-256 is computed by the reading thread while this one decodes:
//!    the file is hashed once, in this pass. The scan also measures how far back in time the
//!    file's records go ([`BufferFile::displacement_ns`]): the largest gap between the latest
//!    start seen so far and a later record's start.
//! 2. **Replay** ([`BufferFile::replay`]): the file is read again and each record is converted
//!    with the joins (the process and external ids learned a join distance ahead of it) and
//!    handed on in exactly the order the whole-file path pushes (by start, work records before
//!    memory events at equal times, equal keys in file order), through a reorder buffer that
//!    holds only the records within the measured displacement of the latest start: a file in
//!    time order holds almost nothing; a file out of order by more than the meter's
//!    reordering horizon is still pushed exactly as the whole-file path pushes it, holding
//!    what the disorder demands.
//!
//! A file with INSTRUCTION_EXECUTION records (rare: instrumented runs) is metered whole by
//! [`meter_buffer`](crate::meter_buffer): splitting a launch's instruction count among its
//! kernels needs all of them.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;

use gpumeter_core::{identity_digest, DeviceInfo, DeviceSlot, LossReason};
use rustc_hash::FxHashMap;

use crate::chunks::{with_chunks, Chunks, FileStamp};
use crate::lookahead::{JoinDistance, Lookahead};
use crate::reorder::{refused_work, replay_item, Reorder};
use crate::scanned::{Sketch, SourceItem, Streamed};
use crate::source::{
    note_invalid, source_name, CuptiFormat, CuptiOptions, CuptiSourceError, CuptiSummary, Devices,
};
use gpumeter_cupti::decode::count_skipped;
use gpumeter_cupti::decode::{DecodeError, LocatedRecord, Walk};
use gpumeter_cupti::join::{convert, correlation_named, intern_name, Converted, Joins};
use gpumeter_cupti::layout::ApiVersion;

/// Why a walk over a file stopped.
enum WalkError {
    Io(io::Error),
    Decode(DecodeError),
}

/// `e` with its offsets moved by `by` bytes (a walk of a slice that starts at `by` in the file).
fn rebase(e: DecodeError, by: usize) -> DecodeError {
    match e {
        DecodeError::Truncated {
            offset,
            kind,
            needed,
            available,
        } => DecodeError::Truncated {
            offset: offset + by,
            kind,
            needed,
            available,
        },
        DecodeError::UnknownKind { offset, kind, api } => DecodeError::UnknownKind {
            offset: offset + by,
            kind,
            api,
        },
        DecodeError::InvalidKind { offset } => DecodeError::InvalidKind {
            offset: offset + by,
        },
        DecodeError::BadField {
            offset,
            kind,
            field,
            value,
            reason,
        } => DecodeError::BadField {
            offset: offset + by,
            kind,
            field,
            value,
            reason,
        },
        other => other,
    }
}

/// Walks the records of the raw buffer read by `chunks` as [`Walk`] walks a buffer in memory
/// (the same records, offsets from the file's start, the same errors); calls `each` per
/// record. Allocates nothing per record.
fn walk_records(
    chunks: &mut Chunks<'_>,
    api: ApiVersion,
    mut each: impl FnMut(LocatedRecord),
) -> Result<(), WalkError> {
    // The offset of a record of kind 0 whose bytes were all zero so far: the buffer's zeroed
    // tail if the rest of the file is zeros, else an invalid kind.
    let mut zeros_from: Option<usize> = None;
    loop {
        let rest = chunks.rest();
        if let Some(z) = zeros_from {
            if rest.iter().any(|&b| b != 0) {
                return Err(WalkError::Decode(DecodeError::InvalidKind { offset: z }));
            }
            let n = rest.len();
            chunks.consume(n);
        } else {
            match Walk::new(rest, api).next() {
                Some(Ok(mut r)) => {
                    r.offset += chunks.offset();
                    chunks.consume(r.size);
                    each(r);
                    continue;
                }
                Some(Err(e)) => {
                    let more = matches!(e, DecodeError::Truncated { .. });
                    if chunks.at_eof() || !more {
                        return Err(WalkError::Decode(rebase(e, chunks.offset())));
                    }
                }
                None if rest.len() >= 4 => {
                    // Zeros to the end of what is read: a tail, or a fault further on.
                    zeros_from = Some(chunks.offset());
                    let n = rest.len();
                    chunks.consume(n);
                }
                None => {}
            }
        }
        if chunks.at_eof() {
            return Ok(());
        }
        // At the end of the file, the next turn walks what is left once more, knowing so.
        chunks.more().map_err(WalkError::Io)?;
    }
}

/// [`walk_records`] over `file`, hashed when `hash` is set (see [`with_chunks`]).
fn walk_file(
    file: File,
    api: ApiVersion,
    hash: bool,
    each: impl FnMut(LocatedRecord),
) -> Result<Option<[u8; 32]>, WalkError> {
    let (walked, digest) = with_chunks(file, hash, |chunks| walk_records(chunks, api, each));
    walked.map(|()| digest)
}

/// A raw CUPTI buffer file, scanned (pass 1, module docs): validated, hashed, joined, its
/// devices, losses and skipped kinds known; its records are handed on by
/// [`BufferFile::replay`] (pass 2).
#[derive(Debug)]
pub struct BufferFile {
    name: String,
    path: std::path::PathBuf,
    api: ApiVersion,
    sha256: String,
    /// The facts of records that are not work; the process and external ids by correlation
    /// id only when `join_distance` is `None`.
    joins: Joins,
    /// The file's join distance in records ([`crate::lookahead`]): the replay learns the
    /// process and external ids that many records ahead. `None` when it is past the cap:
    /// `joins` holds them all, learned by a pass of their own.
    join_distance: Option<u64>,
    names: FxHashMap<u64, Arc<str>>,
    devices: Vec<DeviceInfo>,
    index: FxHashMap<u32, DeviceSlot>,
    losses: Vec<(DeviceSlot, LossReason, u64, bool)>,
    partitions: Vec<(DeviceSlot, u32, u32)>,
    skipped: BTreeMap<&'static str, u64>,
    warnings: Vec<gpumeter_core::Warning>,
    records: u64,
    invalid_records: u64,
    memory_events: u64,
    displacement_ns: u64,
    /// The file's length and modification time when pass 1 read it.
    stamp: FileStamp,
    /// Per device slot, the sketch of its work (empty unless asked for).
    sketches: Vec<Sketch>,
}

/// What [`BufferFile::scan`] found that needs the whole-file path.
enum Scan {
    Streamable(Box<BufferFile>),
    /// INSTRUCTION_EXECUTION records: counts are split among all of a launch's kernels.
    Whole,
}

impl BufferFile {
    /// Pass 1 over the file at `path` (module docs): decodes and validates every record with
    /// the layouts of [`CuptiOptions::api`], learns the joins, computes the SHA-256 on the
    /// reading thread. Names come from [`CuptiOptions::strings`]. `Ok(None)` when the file has
    /// INSTRUCTION_EXECUTION records (meter it whole with [`meter_buffer`](crate::meter_buffer)).
    ///
    /// # Errors
    /// [`CuptiSourceError::Io`] when the file cannot be read; [`CuptiSourceError::Decode`] when
    /// it does not decode (as [`meter_buffer`](crate::meter_buffer), with the same offsets).
    pub fn scan(path: &Path, opts: &CuptiOptions<'_>) -> Result<Option<Self>, CuptiSourceError> {
        match scan(path, opts, false)? {
            Scan::Streamable(b) => Ok(Some(*b)),
            Scan::Whole => Ok(None),
        }
    }

    /// The file's name in the report (its file name, no directories).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The SHA-256 of the file's bytes, lowercase hex.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// The devices with activity, in order of first activity: the replay's device slots.
    pub fn devices(&self) -> &[DeviceInfo] {
        &self.devices
    }

    /// Green contexts of devices with activity: (device slot, context id, SMs).
    pub fn partitions(&self) -> &[(DeviceSlot, u32, u32)] {
        &self.partitions
    }

    /// How far back in time (ns) a record's start goes behind the latest start before it in
    /// the file: what the replay's reorder buffer spans (0 for a file in time order).
    pub fn displacement_ns(&self) -> u64 {
        self.displacement_ns
    }

    /// Pass 2: reads the file again and hands every work record and device-memory event, with
    /// its joined process and external ids and its device slot ([`BufferFile::devices`]), to
    /// `sink`, sorted as the whole-file path sorts them (by start; at equal times work before
    /// memory; equal keys in file order). Returns how many work records had their process id
    /// and their external id joined.
    ///
    /// # Errors
    /// [`CuptiSourceError::Io`] / [`CuptiSourceError::Decode`] when the file cannot be read
    /// again or no longer decodes (it changed since the scan); what was handed on before stays.
    pub fn replay(&self, mut sink: impl FnMut(SourceItem)) -> Result<(u64, u64), CuptiSourceError> {
        let mut reorder = Reorder::new(self.displacement_ns);
        let (mut pids, mut exts) = (0u64, 0u64);
        let io = |error| CuptiSourceError::Io {
            name: self.name.clone(),
            error,
        };
        let file = File::open(&self.path).map_err(io)?;
        self.stamp.check(FileStamp::of(&file)).map_err(io)?;
        let walked = match self.join_distance {
            // Every join known (or, at a distance of 0, none that any work names): converted
            // as read.
            None | Some(0) => {
                let joins = self.joins.joins_ref(None);
                walk_file(file, self.api, false, |r| {
                    let converted = convert(&r, &self.names, &joins);
                    if let Some((t, item, pid_joined, ext_joined)) =
                        replay_item(converted, &self.index)
                    {
                        pids += u64::from(pid_joined);
                        exts += u64::from(ext_joined);
                        reorder.push(t, item, &mut sink);
                    }
                })
            }
            // Converted as read, joined `distance` records later.
            Some(distance) => {
                let none = Joins::default();
                let no_joins = none.joins_ref(None);
                let mut window = Lookahead::new(distance, None);
                let mut emit = |t, item, pid_joined, ext_joined| {
                    pids += u64::from(pid_joined);
                    exts += u64::from(ext_joined);
                    reorder.push(t, item, &mut sink);
                };
                let walked = walk_file(file, self.api, false, |r| {
                    let converted = convert(&r, &self.names, &no_joins);
                    let item = replay_item(converted, &self.index).map(|(t, item, ..)| (t, item));
                    window.push(&r, item, &mut emit);
                });
                window.finish(&mut emit);
                walked
            }
        };
        reorder.drain(&mut sink);
        walked.map_err(|e| self.error(e))?;
        self.stamp.check(FileStamp::at(&self.path)).map_err(io)?;
        Ok((pids, exts))
    }

    fn error(&self, e: WalkError) -> CuptiSourceError {
        match e {
            WalkError::Io(error) => CuptiSourceError::Io {
                name: self.name.clone(),
                error,
            },
            WalkError::Decode(error) => CuptiSourceError::Decode {
                name: self.name.clone(),
                frame: None,
                error,
            },
        }
    }
}

fn scan(path: &Path, opts: &CuptiOptions<'_>, sketch: bool) -> Result<Scan, CuptiSourceError> {
    let name = source_name(path);
    let io = |error| CuptiSourceError::Io {
        name: name.clone(),
        error,
    };
    let file = File::open(path).map_err(io)?;
    let stamp = FileStamp::of(&file).map_err(io)?;
    let strings = opts.string_table();
    let mut names: FxHashMap<u64, Arc<str>> = FxHashMap::default();
    let mut joins = Joins::default();
    let none = Joins::default();
    let no_joins = none.joins_ref(None);
    let mut order: Vec<u32> = Vec::new();
    let mut seen: FxHashMap<u32, ()> = FxHashMap::default();
    let mut skipped: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut invalid: BTreeMap<u32, u64> = BTreeMap::new();
    let mut faults: BTreeMap<&'static str, (u64, String)> = BTreeMap::new();
    let (mut records, mut memory_events) = (0u64, 0u64);
    let (mut latest, mut displacement) = (0u64, 0u64);
    let mut distance = JoinDistance::default();
    let mut item = |t: u64| {
        latest = latest.max(t);
        displacement = displacement.max(latest - t);
    };
    let mut note = |id: u32| {
        if seen.insert(id, ()).is_none() {
            order.push(id);
        }
    };
    // Per device id: the sketch of its work, for `merge::meter_files`.
    let mut sketches: FxHashMap<u32, Sketch> = FxHashMap::default();
    let mut sketch_of = |id: u32, d: u64| sketches.entry(id).or_default().add(d);
    let walked = walk_file(file, opts.api, true, |r| {
        intern_name(&r.record, &strings, &mut names);
        count_skipped(&r.record, &mut skipped);
        // The process and external ids are learned in the replay's window, or by a pass of
        // their own when the file's join distance is past the cap (below).
        if !matches!(distance.record(&r.record), Some((_, true))) {
            joins.learn(std::slice::from_ref(&r), &names);
        }
        match convert(&r, &names, &no_joins) {
            Converted::Work { device_id, rec, .. } => {
                note(device_id);
                if !refused_work(&rec) {
                    item(rec.start_ns);
                }
                if sketch {
                    sketch_of(device_id, identity_digest(&rec.identity()));
                }
                records += 1;
            }
            Converted::Memory { device_id, ev } => {
                note(device_id);
                item(ev.timestamp_ns);
                if sketch {
                    sketch_of(device_id, identity_digest(&ev.identity()));
                }
                memory_events += 1;
            }
            Converted::Skipped(cat) => *skipped.entry(cat).or_insert(0) += 1,
            Converted::Invalid(bad) => {
                note_invalid(&mut invalid, &mut faults, &name, None, &r, bad);
                note(bad.device_id);
            }
            Converted::Consumed => {}
        }
    });
    let digest = walked.map_err(|e| walk_error(&name, e))?;
    if !joins.instructions_of.is_empty() {
        return Ok(Scan::Whole);
    }
    let join_distance = distance.finish();
    drop(distance);
    if join_distance.is_none() {
        learn_correlations(path, opts.api, stamp, &mut joins).map_err(|e| walk_error(&name, e))?;
    }
    let sha256 = digest.map(hex::encode).unwrap_or_default();
    let key_label = gpumeter_core::source_label(&sha256);
    let (devices, index, losses, partitions) = place_devices(&key_label, &joins, order, &invalid);
    let warnings: Vec<gpumeter_core::Warning> = faults
        .into_values()
        .map(|(n, first)| gpumeter_core::invalid_field_warning(&first, n))
        .collect();
    let local_sketches = sketches_by_slot(sketches, &index, devices.len());
    Ok(Scan::Streamable(Box::new(BufferFile {
        name,
        path: path.to_path_buf(),
        api: opts.api,
        sha256,
        joins,
        join_distance,
        names,
        devices,
        index,
        losses,
        partitions,
        skipped,
        warnings,
        records,
        invalid_records: invalid.values().sum(),
        memory_events,
        displacement_ns: displacement,
        stamp,
        sketches: local_sketches,
    })))
}

/// `e`, met walking the file `name`, as the source's error.
fn walk_error(name: &str, e: WalkError) -> CuptiSourceError {
    match e {
        WalkError::Io(error) => CuptiSourceError::Io {
            name: name.to_string(),
            error,
        },
        WalkError::Decode(error) => CuptiSourceError::Decode {
            name: name.to_string(),
            frame: None,
            error,
        },
    }
}

/// The file's devices in first-seen `order`, their slots by device id, the invalid records
/// booked as losses on their device, and the green-context partitions.
#[allow(clippy::type_complexity)]
fn place_devices(
    key_label: &str,
    joins: &Joins,
    order: Vec<u32>,
    invalid: &BTreeMap<u32, u64>,
) -> (
    Vec<DeviceInfo>,
    FxHashMap<u32, DeviceSlot>,
    Vec<(DeviceSlot, LossReason, u64, bool)>,
    Vec<(DeviceSlot, u32, u32)>,
) {
    let mut devs = Devices {
        source: key_label,
        inventory: &[],
        device_recs: &joins.device_recs,
        devices: Vec::new(),
        index: FxHashMap::default(),
    };
    for id in order {
        devs.slot(id);
    }
    let losses: Vec<(DeviceSlot, LossReason, u64, bool)> = invalid
        .iter()
        .map(|(&id, &n)| (devs.slot(id), LossReason::InvalidField, n, false))
        .collect();
    let partitions = devs.partitions(&joins.green);
    (devs.devices, devs.index, losses, partitions)
}

/// The sketches by device id placed on their devices' slots (`n` of them).
fn sketches_by_slot(
    sketches: FxHashMap<u32, Sketch>,
    index: &FxHashMap<u32, DeviceSlot>,
    n: usize,
) -> Vec<Sketch> {
    let mut local_sketches = vec![Sketch::default(); n];
    for (id, k) in sketches {
        if let Some(slot) = index.get(&id) {
            if let Some(s) = local_sketches.get_mut(slot.0 as usize) {
                *s = k;
            }
        }
    }
    local_sketches
}

/// The pass of a file whose join distance is past the cap ([`crate::lookahead`]): reads the
/// file at `path` (as `stamp` saw it) once more and learns every process and external id by
/// correlation id into `joins`, as the whole-file path does.
fn learn_correlations(
    path: &Path,
    api: ApiVersion,
    stamp: FileStamp,
    joins: &mut Joins,
) -> Result<(), WalkError> {
    let file = File::open(path).map_err(WalkError::Io)?;
    stamp.check(FileStamp::of(&file)).map_err(WalkError::Io)?;
    let names = FxHashMap::default();
    walk_file(file, api, false, |r| {
        if matches!(correlation_named(&r.record), Some((_, true))) {
            joins.learn(std::slice::from_ref(&r), &names);
        }
    })?;
    stamp.check(FileStamp::at(path)).map_err(WalkError::Io)
}

/// Pass 1 over the raw buffer file at `path` ([`BufferFile::scan`]) as a source for
/// [`crate::merge`]; with the sketches of its devices' work when `sketch` is set. `None`
/// when the file must be metered whole.
pub(crate) fn scan_stream(
    path: &Path,
    opts: &CuptiOptions<'_>,
    sketch: bool,
) -> Result<Option<Streamed<Box<BufferFile>>>, CuptiSourceError> {
    let mut file = match scan(path, opts, sketch)? {
        Scan::Streamable(b) => b,
        Scan::Whole => return Ok(None),
    };
    let summary = CuptiSummary {
        source_name: file.name.clone(),
        format: CuptiFormat::Cupti,
        api: file.api,
        records: file.records + file.invalid_records,
        skipped: file.skipped.values().sum(),
        duplicate_source: false,
        sha256: file.sha256.clone(),
        device_keys: file.devices.iter().map(|d| d.key.clone()).collect(),
        process_ids_joined: 0,
        external_ids_joined: 0,
        dropped: 0,
        buffers: 1,
        energy_samples: 0,
        pm_samples: 0,
        memory_events: file.memory_events,
        green_contexts: file.partitions.len() as u64,
        kernels_with_instructions: 0,
        kernels_with_op_counts: 0,
        allocations_closed_at_end: 0,
        attribution_events: 0,
        unknown_frames: 0,
        torn: None,
        finished: true,
    };
    Ok(Some(Streamed {
        summary,
        devices: file.devices.clone(),
        warnings: std::mem::take(&mut file.warnings),
        partitions: file.partitions.clone(),
        losses: std::mem::take(&mut file.losses),
        source_losses: Vec::new(),
        skipped: std::mem::take(&mut file.skipped),
        energy: Vec::new(),
        recording: None,
        ends: Vec::new(),
        pm_ends: Vec::new(),
        sketches: std::mem::take(&mut file.sketches),
        replayer: file,
    }))
}
