//! Kineto / PyTorch-profiler Chrome-trace JSON (plain or gzip) to activity records.
//!
//! * Time: `ts`/`dur` are µs. With a top-level `baseTimeNanoseconds` (modern files), `ts` is
//!   relative to it: absolute ns = base + round(ts × 1000); without it (older files), `ts` is
//!   absolute µs. The decimal text is converted exactly ([`crate::units`]). A raw `ts` of 0
//!   means "not recorded" and gives a start of 0 whatever the base (loss `zero_timestamp`); a
//!   negative `dur` is loss `end_before_start`.
//! * Work: categories `kernel`/`Kernel`, `gpu_memcpy`/`Memcpy`, `gpu_memset`/`Memset`; and
//!   `cuda_profiler_range` complete events with CUPTI metric arguments (keys containing `__`:
//!   PyTorch's profiler in CUPTI-profiler mode), measured kernel ranges: on a device without
//!   kernel events each is a kernel launch timed by the range, else their operation counts
//!   ([`gpumeter_core::OpCounts`]) attach to the device's kernel events by name and launch
//!   order ([`resolve_ranges`]); CPU-side kernel launches with nothing GPU-side recorded are
//!   warned about (`launches_without_gpu_events`). Not work, counted as skipped by category:
//!   `gpu_user_annotation`, `cuda_sync`, `cuda_profiler_range` without metric arguments (or
//!   matching no kernel), `Trace`. Categories are matched ignoring ASCII case and surrounding whitespace (`KERNEL`,
//!   `"kernel "`), and counted under Kineto's spelling. Everything else (CPU-side events,
//!   flows, metadata) is ignored and not counted, except what could hide GPU work: a complete
//!   (`X`) or begin (`B`) event without a `cat` whose `args.device` names a device is counted
//!   as skipped (`no_category_with_device`) with a warning, a `cat` that is not a string as
//!   `unreadable_category`, and an element of `traceEvents` that is not a JSON object
//!   (`null`, `5`, `[1,2]`, `"x"`) as `not_an_event_object` with a warning naming the first.
//! * `B`/`E` pairs: an `E` closes the innermost open `B` (of any category) with the same `pid`
//!   and `tid`, compared as text: a string's content and a number's text are the same key
//!   (`"0"` and `0`).
//! * A key given twice in an event or in its `args` (`ts`, `args.device`) makes a GPU work
//!   event a lost record (`invalid_field`) whose warning gives both values; a device id given
//!   twice in `deviceProperties` with different values refuses the file (identical entries are
//!   one device).
//! * Device: `args.device`, else the event's integer `pid` (a GPU event's `pid` is the device
//!   index). Stream: `args.stream`, else `tid` (`7` or `"stream 7"`).
//! * Process id: the OS `pid` of the CPU-side `cuda_runtime`/`cuda_driver` (2021 schema:
//!   `Runtime`/`Driver`) event with the same `args.correlation`.
//! * External id: none. Kineto's `args."External id"` is PyTorch's own operator id, not a
//!   tenant tag (usage is attributed by CUPTI EXTERNAL_CORRELATION ids that an agent pushes):
//!   it is not read, so it neither matches a tenant map's `[external]` ids nor makes one
//!   attribution key per operator in the meter.
//! * Devices without a UUID are keyed `<label>#<id>`, the label being given by the caller
//!   (the first 16 hex digits of the content's SHA-256, see the crate docs).
//! * Reading: a stream ([`read_events`]; the caller reads, decompresses and hashes the file as a
//!   stream on a thread of its own, `crate::read_ahead`), read in chunks of 1 MiB into one reused buffer ([`text::Source`]). The
//!   top-level object is read by serde's visitors through `serde_json::from_reader`; the
//!   `traceEvents` array by [`array::read_array`], which parses each element with serde_json from the
//!   chunk buffer, its fields borrowed from it (an element cut by the chunk's end is parsed
//!   again with the next chunk after it). Memory holds the GPU work events kept and open `B`
//!   events, never the document; an event whose `ph` and `cat` settle it as ignorable (most
//!   CPU-side events) has its other fields checked and dropped, not kept (when its `ph` and `cat` come
//!   first and its text is plain, skipped whole by serde_json: [`settled::settled_event`]). Strings are cut at
//!   [`MAX_STRING_BYTES`] as the text is read ([`string_cap::StringCap`]), since serde_json reads a string
//!   whole; a cut string ends in a digest of the text dropped, escapes decoded ([`crate::CUT_MARK`]), and that text is
//!   validated as serde_json validates a string. Bad JSON is reported at the line and column of the text, with serde_json's message,
//!   as a parse of the whole text reports it (`array::replay`).

mod array;
mod collect;
mod cpu;
mod devices;
mod document;
mod event;
mod fault;
mod gpu;
mod json;
mod ranges;
mod settled;
mod string_cap;
mod text;

#[cfg(test)]
mod tests;

use std::path::Path;

use gpumeter_core::{ActivityRecord, Warning, WarningCode, Work};

use self::collect::{Open, NOT_AN_EVENT_OBJECT, NO_CATEGORY_WITH_DEVICE};
use self::devices::{parse_device_properties, Devices};
use self::event::{device_hint, is_work, read_args, Args, Class};
use self::fault::Fault;
use self::gpu::{absolute_times, Times};
use self::ranges::{range_warnings, resolve_ranges, Range};
use crate::cut::MAX_STRING_BYTES;
use crate::error::{ImportError, RecordLocation};
use crate::parsed::{file_name, Parsed};

pub(crate) use self::collect::Collector;
pub(crate) use self::document::read_events;

/// Turns the events read by [`read_events`] into records, devices and warnings.
/// `key_label` is what keys of devices without a UUID are built from
/// ([`gpumeter_core::DeviceInfo::source_key`]).
///
/// # Errors
/// A file-level [`ImportError`] in `baseTimeNanoseconds` or `deviceProperties`.
pub(crate) fn finish(mut c: Collector<'_>, key_label: &str) -> Result<Parsed, ImportError> {
    let path = c.path;
    close_unclosed(&mut c);
    let base_ns = base_time(path, c.base.as_deref())?;
    let props = parse_device_properties(path, key_label, c.device_properties.as_deref())?;
    // Devices in order of first activity; records carry local indices until committed.
    let mut devices = Devices::new(props, key_label);
    let mut parsed = Parsed::default();
    // Measured kernel ranges: on a device with kernel events their counts attach to those
    // kernels; on a device without, each range is a launch.
    let had_ranges = !c.ranges.is_empty();
    let first_range_launch = c.pending.len();
    let ranges = resolve_ranges(
        &mut c.pending,
        std::mem::take(&mut c.ranges),
        &mut c.invalid,
        &c.cpu.launch_ts,
    );
    let gpu_events = !c.pending.is_empty() || !c.invalid.is_empty() || had_ranges;
    // Kernels the trace records, read or not: for the launches-without-kernels warning.
    let kernels_recorded = c
        .pending
        .iter()
        .filter(|p| matches!(p.rec.work, Work::Kernel(_)))
        .count() as u64
        + c.invalid.len() as u64;
    // A range carries no correlation id: its launch is of the trace's one launching process
    // when there is exactly one.
    let range_pid = c.cpu.range_pid();
    let records = timed_records(
        &mut c,
        base_ns,
        first_range_launch,
        &mut devices,
        &mut parsed,
    );
    for (device, e) in std::mem::take(&mut c.invalid) {
        let slot = device.map(|id| devices.slot(id, &mut parsed));
        parsed.invalid(slot, &e);
    }
    let name = file_name(path);
    c.cpu.api_warning(&name, &mut parsed.warnings);
    event_warnings(&c, &name, &mut parsed.warnings);
    range_warnings(
        &name,
        &ranges,
        range_pid,
        c.cpu.launch_pids.len(),
        &mut parsed.warnings,
    );
    if ranges.unmatched > 0 {
        *c.skipped
            .entry("cuda_profiler_range".to_string())
            .or_insert(0) += ranges.unmatched;
    }
    c.cpu
        .launch_warning(&name, gpu_events, kernels_recorded, &mut parsed.warnings);
    parsed.records = records;
    parsed.skipped = c.skipped;
    Ok(parsed)
}

/// `B` events never closed by their `E`: a work event is lost; a measured range must not
/// vanish (lost on a range-only device, or unmatched); an unmeasured one is skipped.
fn close_unclosed(c: &mut Collector<'_>) {
    let mut unclosed: Vec<Open> = c.open.drain().flat_map(|(_, v)| v).collect();
    unclosed.sort_by_key(|o| o.index);
    for o in unclosed.into_iter() {
        let e = c.fault(o.index).err(
            "ph",
            "B",
            "a B (begin) event whose E (end) never comes on its pid and tid",
        );
        if is_work(o.class) {
            c.lose(&o.event.view(), e);
        } else if o.class == Class::ProfilerRange {
            // A measured range must not vanish: lost (a range-only device) or unmatched.
            let ev = o.event.view();
            let measured =
                read_args(&c.fault(o.index), ev.args).map_or(true, |a| !a.metrics.is_empty());
            if measured {
                let device_id = device_hint(&ev, &Args::default());
                c.ranges.push(Range::unread(o.index, device_id, e));
            } else {
                c.skip("cuda_profiler_range");
            }
        }
    }
}

/// `baseTimeNanoseconds` in ns since the epoch (0 without one).
fn base_time(path: &Path, raw: Option<&serde_json::value::RawValue>) -> Result<i128, ImportError> {
    let top = Fault {
        path,
        record: RecordLocation::TopLevel,
    };
    match top.int_opt("baseTimeNanoseconds", raw)? {
        None => Ok(0),
        Some(v) if v < 0 => Err(top.err(
            "baseTimeNanoseconds",
            &v.to_string(),
            "negative: before the Unix epoch",
        )),
        Some(v) if v > i128::from(u64::MAX) => Err(top.err(
            "baseTimeNanoseconds",
            &v.to_string(),
            "after 2554 (outside u64 ns since the Unix epoch)",
        )),
        Some(v) => Ok(v),
    }
}

/// The pending records with their absolute times, devices and process ids (a range launch,
/// from `first_range_launch` on, is of the trace's one launching process), sorted by (start,
/// end); those whose times cannot be are booked in `parsed` as lost.
fn timed_records(
    c: &mut Collector<'_>,
    base_ns: i128,
    first_range_launch: usize,
    devices: &mut Devices<'_>,
    parsed: &mut Parsed,
) -> Vec<ActivityRecord> {
    let path = c.path;
    let range_pid = c.cpu.range_pid();
    let pending = std::mem::take(&mut c.pending);
    let mut records = Vec::with_capacity(pending.len());
    for (i, p) in pending.into_iter().enumerate() {
        let f = Fault {
            path,
            record: RecordLocation::TraceEvent(p.index),
        };
        let slot = devices.slot(p.device_id, parsed);
        match absolute_times(&f, &p, base_ns) {
            Times::Valid(start_ns, end_ns) => {
                let mut rec = p.rec;
                rec.start_ns = start_ns;
                rec.end_ns = end_ns;
                rec.device = slot;
                rec.process_id = if i >= first_range_launch {
                    range_pid
                } else {
                    c.cpu.process_of(p.correlation)
                };
                records.push(rec);
            }
            Times::Lost(reason) => parsed.losses.push((slot, reason)),
            Times::Invalid(e) => parsed.invalid(Some(slot), &e),
        }
    }
    records.sort_by_key(|r| (r.start_ns, r.end_ns));
    records
}

/// The warnings of events that were read but not metered as they were written: kernel names
/// that are not valid Unicode, elements that are not objects, strings cut, events without a
/// category that name a device.
fn event_warnings(c: &Collector<'_>, name: &str, warnings: &mut Vec<Warning>) {
    if c.names.bad > 0 {
        warnings.push(Warning::new(
            WarningCode::InvalidNames,
            format!(
                "{name}: {} kernel names are not valid Unicode (a lone surrogate escape): those \
             kernels are metered without a name",
                c.names.bad
            ),
        ));
    }
    if let Some((first, kind)) = c.not_objects {
        let n = c.skipped.get(NOT_AN_EVENT_OBJECT).copied().unwrap_or(0);
        warnings.push(Warning::new(
            WarningCode::NotEventObjects,
            format!(
                "{name}: {n} elements of `traceEvents` are not JSON objects, so not trace events \
             (the first: traceEvents[{first}], {kind}): counted in records.skipped as \
             `{NOT_AN_EVENT_OBJECT}`"
            ),
        ));
    }
    if c.cut_strings > 0 {
        warnings.push(Warning::new(
            WarningCode::StringsCut,
            format!(
            "{name}: {} strings are longer than {MAX_STRING_BYTES} bytes of JSON text: each was \
             cut there (at a character boundary) and the rest of it not read, so a kernel or \
             device name among them is kept cut",
            c.cut_strings
        ),
        ));
    }
    if let Some(n) = c.skipped.get(NO_CATEGORY_WITH_DEVICE) {
        warnings.push(Warning::new(
            WarningCode::UncategorizedDeviceEvents,
            format!(
            "{name}: {n} complete or begin events have no `cat` but an `args.device`: not known \
             to be GPU work, they are not metered (counted in records.skipped as \
             `{NO_CATEGORY_WITH_DEVICE}`)"
        ),
        ));
    }
}
