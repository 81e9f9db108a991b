//! GPU events: a kernel, memcpy or memset event (a complete `X` event or a `B`/`E` pair) to a
//! [`Pending`] record ([`work_event`]): its device, stream, kernel facts and bytes, its times
//! relative to the trace's base, made absolute once the base is known ([`absolute_times`]).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use gpumeter_core::time::MAX_RECORD_NS;
use gpumeter_core::{ActivityRecord, CopyDirection, DeviceSlot, KernelLaunch, LossReason, Work};
use serde_json::value::RawValue;

use super::event::{Args, Class, Event};
use super::fault::Fault;
use super::json::raw_str;
use crate::error::{shorten, ImportError, RecordLocation};
use crate::units::{integer_text, micros_text_to_ns};

/// A stream id from `args.stream` or `tid`: CUPTI stream ids are `u32`; −1 (Kineto writes it
/// for device-wide syncs) is taken as `u32::MAX`. `None` for any other value outside `u32`:
/// it cannot be a CUPTI stream, and truncating it would make two streams one.
pub(super) fn stream_from(v: i128) -> Option<u32> {
    match v {
        -1 => Some(u32::MAX),
        v => u32::try_from(v).ok(),
    }
}

/// Parses the `tid` of a GPU event as a stream: `7`, `"7"` or `"stream 7"`. `Ok(None)` when
/// the `tid` is not a stream at all (a thread name); `Err(value)` for a stream number outside
/// `u32`.
pub(super) fn stream_from_tid(raw: &RawValue) -> Result<Option<u32>, i128> {
    let t = raw.get();
    let digits = match integer_text(t) {
        Ok(v) => return stream_from(v).map(Some).ok_or(v),
        Err(_) => match raw_str(raw) {
            Ok(s) => s.trim().to_string(),
            Err(_) => return Ok(None),
        },
    };
    let digits = digits
        .strip_prefix("stream")
        .map(str::trim)
        .unwrap_or(&digits);
    match integer_text(digits) {
        Ok(v) => stream_from(v).map(Some).ok_or(v),
        Err(_) => Ok(None),
    }
}

/// Whether the text of a JSON number is zero (`0`, `0.0`, `-0`, `0e5`).
pub(super) fn text_is_zero(t: &str) -> bool {
    t.bytes()
        .take_while(|c| !matches!(c, b'e' | b'E'))
        .all(|c| matches!(c, b'0' | b'-' | b'.'))
}

/// Copy direction from a Kineto memcpy event's name (`Memcpy HtoD (Pageable -> Device)`).
pub(super) fn direction_from_name(name: &str) -> CopyDirection {
    let kind = name
        .strip_prefix("Memcpy")
        .map(str::trim_start)
        .unwrap_or(name)
        .split(|c: char| c.is_whitespace() || c == '(')
        .next()
        .unwrap_or("");
    match kind {
        "HtoD" => CopyDirection::HostToDevice,
        "DtoH" => CopyDirection::DeviceToHost,
        "DtoD" => CopyDirection::DeviceToDevice,
        "PtoP" => CopyDirection::Peer,
        _ => CopyDirection::Other,
    }
}

/// A GPU work event, converted but for its absolute times (the `baseTimeNanoseconds` it needs
/// may come after `traceEvents` in the file), its device and its process id.
pub(super) struct Pending<'de> {
    pub(super) index: usize,
    pub(super) device_id: u32,
    pub(super) correlation: Option<u32>,
    /// The field `ts_text` comes from (`ts`; for a `B`/`E` pair, the `B` event's `ts`).
    pub(super) ts_field: &'static str,
    /// `ts` as written, for messages.
    pub(super) ts_text: Cow<'de, str>,
    /// `ts` in ns (relative to the base when there is one).
    pub(super) ts_ns: i128,
    /// The field the duration comes from (`dur`; for a `B`/`E` pair, the `E` event's `ts`).
    pub(super) dur_field: &'static str,
    pub(super) dur_text: Cow<'de, str>,
    pub(super) dur_ns: i128,
    /// The record with `start_ns`/`end_ns` still 0 and a placeholder device.
    pub(super) rec: ActivityRecord,
}

impl Pending<'_> {
    /// The same, owning its texts (kept past the event they were read from).
    pub(super) fn into_owned(self) -> Pending<'static> {
        Pending {
            ts_text: Cow::Owned(self.ts_text.into_owned()),
            dur_text: Cow::Owned(self.dur_text.into_owned()),
            index: self.index,
            device_id: self.device_id,
            correlation: self.correlation,
            ts_field: self.ts_field,
            dur_field: self.dur_field,
            ts_ns: self.ts_ns,
            dur_ns: self.dur_ns,
            rec: self.rec,
        }
    }
}

/// What a pending record's times make of it.
pub(super) enum Times {
    /// Absolute (start, end) in ns since the epoch.
    Valid(u64, u64),
    /// A record the policy loses: a negative duration (`end_before_start`), one over 7 days
    /// (`too_long`).
    Lost(LossReason),
    /// A time outside `u64` ns since the epoch (`invalid_field`, naming the field).
    Invalid(ImportError),
}

/// The record's absolute times: start = base + `ts`, end = start + duration. A raw
/// `ts` of 0 means "not recorded": (0, 0), which the meter counts as `zero_timestamp`. A
/// negative duration is `end_before_start` and one over 7 days `too_long` whatever its end
/// would be (a 540-year `dur` need not fit `u64` ns to be too long); a start or end outside
/// `u64` ns since the epoch is `invalid_field` on the field that puts it there.
pub(super) fn absolute_times(f: &Fault<'_>, p: &Pending<'_>, base_ns: i128) -> Times {
    if text_is_zero(&p.ts_text) {
        return Times::Valid(0, 0);
    }
    let start = match to_epoch_ns(base_ns.checked_add(p.ts_ns)) {
        Ok(s) => s,
        Err(r) => {
            let why = if base_ns > 0 {
                format!("{r} (with baseTimeNanoseconds = {base_ns})")
            } else {
                r.to_string()
            };
            return Times::Invalid(f.err(p.ts_field, &p.ts_text, why));
        }
    };
    if p.dur_ns < 0 {
        return Times::Lost(LossReason::EndBeforeStart);
    }
    if p.dur_ns > i128::from(MAX_RECORD_NS) {
        return Times::Lost(LossReason::TooLong);
    }
    match to_epoch_ns(i128::from(start).checked_add(p.dur_ns)) {
        Ok(end) => Times::Valid(start, end),
        Err(r) => Times::Invalid(f.err(p.dur_field, &p.dur_text, r)),
    }
}

/// A time in ns since the epoch (`None`: the sum overflowed) as `u64`, or why it is not one.
pub(super) fn to_epoch_ns(t: Option<i128>) -> Result<u64, &'static str> {
    match t {
        Some(t) if t < 0 => Err("the time lies before 1970 (outside u64 ns since the epoch)"),
        Some(t) => u64::try_from(t)
            .map_err(|_| "the time overflows: it lies after 2554 (outside u64 ns since the epoch)"),
        None => Err("the time overflows: it lies after 2554 (outside u64 ns since the epoch)"),
    }
}

/// A required time field of `ev` as (text, ns relative to the trace's base).
pub(super) fn time_field<'de>(
    f: &Fault<'_>,
    field: &'static str,
    raw: Option<&'de RawValue>,
) -> Result<(Cow<'de, str>, i128), ImportError> {
    let text = raw
        .map(|r| f.number_text(field, r))
        .transpose()?
        .flatten()
        .ok_or_else(|| f.err(field, "", "missing"))?;
    let ns = micros_text_to_ns(&text).map_err(|e| f.err(field, &text, e))?;
    Ok((text, ns))
}

/// Kernel names as read: each distinct name held once (shared by its kernels' records), and
/// how many were not valid Unicode.
#[derive(Default)]
pub(super) struct KernelNames {
    interned: HashMap<String, Arc<str>>,
    /// Kernel names that are not valid Unicode (metered without a name).
    pub(super) bad: u64,
}

impl KernelNames {
    /// The name of a kernel event. A name is informational, never metered: a kernel whose name
    /// is not valid Unicode is metered without one (and counted in a warning).
    ///
    /// # Errors
    /// [`ImportError::BadField`] for a `name` that is not a string.
    fn of(&mut self, f: &Fault<'_>, ev: &Event<'_>) -> Result<Option<Arc<str>>, ImportError> {
        Ok(match ev.name.map(raw_str) {
            Some(Ok(n)) => Some(match self.interned.get(n.as_ref()) {
                Some(known) => known.clone(),
                None => self
                    .interned
                    .entry(n.into_owned())
                    .or_insert_with_key(|k| Arc::from(k.as_str()))
                    .clone(),
            }),
            Some(Err(_)) if ev.name.is_some_and(|r| r.get().starts_with('"')) => {
                self.bad += 1;
                None
            }
            Some(Err(why)) => {
                return Err(f.err("name", ev.name.map_or("", RawValue::get), why));
            }
            None => None,
        })
    }
}

/// One GPU work event (kernel, memcpy, memset) to a pending record: a complete (`X`) event, or
/// a `B` event `ev` closed by the `E` event `end` (duration = the `E`'s `ts` − the `B`'s).
///
/// # Errors
/// [`ImportError::BadField`] naming the field that cannot be represented; the caller books the
/// record as lost (`invalid_field`).
pub(super) fn work_event<'de>(
    f: &Fault<'_>,
    ev: &Event<'de>,
    end: Option<&Event<'de>>,
    args: &Args<'_>,
    class: Class,
    names: &mut KernelNames,
) -> Result<Pending<'de>, ImportError> {
    let index = match &f.record {
        RecordLocation::TraceEvent(i) => *i,
        _ => 0,
    };
    let device_id = device_of(f, ev, args)?;
    let (ts_text, ts_ns) = time_field(f, "ts", ev.ts)?;
    let (dur_field, dur_text, dur_ns) = duration(f, ev, end, &ts_text, ts_ns)?;
    let correlation = f.u32_opt("args.correlation", args.correlation)?;
    let work = work_of(f, ev, args, class, names)?;
    let stream_id = stream_of(f, ev, args)?;
    let mut rec = ActivityRecord::new(DeviceSlot(0), 0, 0, work);
    rec.stream_id = stream_id;
    rec.context_id = f.u32_opt("args.context", args.context)?.unwrap_or(0);
    rec.correlation_id = correlation.unwrap_or(0);
    // `args."External id"` is PyTorch's operator id, not an external correlation id for
    // attribution (module docs): `external_id` stays `None`.
    Ok(Pending {
        index,
        device_id,
        correlation,
        ts_field: "ts",
        ts_text,
        ts_ns,
        dur_field,
        dur_text,
        dur_ns,
        rec,
    })
}

/// The device of a work event: `args.device`, else its `pid` (a GPU event's `pid` is the
/// device index).
fn device_of(f: &Fault<'_>, ev: &Event<'_>, args: &Args<'_>) -> Result<u32, ImportError> {
    match f.u32_opt("args.device", args.device)? {
        Some(d) => Ok(d),
        None => {
            let pid = ev.pid.map(RawValue::get).unwrap_or("");
            integer_text(pid)
                .ok()
                .and_then(|p| u32::try_from(p).ok())
                .ok_or_else(|| {
                    f.err(
                        "args.device",
                        "",
                        format!(
                            "missing, and `pid` ({}) is not a device index",
                            shorten(pid)
                        ),
                    )
                })
        }
    }
}

/// A work event's duration as (the field it comes from, its text, ns): its `dur`, or for a
/// `B` event closed by `end`, the `E`'s `ts` − the `B`'s (`ts_text`, `ts_ns`).
fn duration<'de>(
    f: &Fault<'_>,
    ev: &Event<'de>,
    end: Option<&Event<'de>>,
    ts_text: &str,
    ts_ns: i128,
) -> Result<(&'static str, Cow<'de, str>, i128), ImportError> {
    Ok(match end {
        None => {
            let (t, n) = time_field(f, "dur", ev.dur)?;
            ("dur", t, n)
        }
        Some(e) => {
            let (t, n) = time_field(f, "ts", e.ts).map_err(|_| {
                f.err(
                    "E.ts",
                    e.ts.map_or("", RawValue::get),
                    "the E (end) event's `ts` is not a time",
                )
            })?;
            let text = Cow::Owned(format!("{t} - {ts_text}"));
            ("E.ts", text, n - ts_ns)
        }
    })
}

/// What a work event of `class` did: a kernel launch (its name, grid, block, registers and
/// shared memory), a memcpy (bytes, direction from its name) or a memset (bytes).
fn work_of(
    f: &Fault<'_>,
    ev: &Event<'_>,
    args: &Args<'_>,
    class: Class,
    names: &mut KernelNames,
) -> Result<Work, ImportError> {
    let bytes = || {
        f.u64_opt("args.bytes", args.bytes)?
            .ok_or_else(|| f.err("args.bytes", "", "missing"))
    };
    Ok(match class {
        Class::Kernel => {
            let name = names.of(f, ev)?;
            Work::Kernel(KernelLaunch {
                grid: f.dim3_opt("args.grid", args.grid)?,
                block: f.dim3_opt("args.block", args.block)?,
                registers_per_thread: f
                    .u32_opt("args.registers per thread", args.registers_per_thread)?,
                shared_mem_bytes: f.u64_opt("args.shared memory", args.shared_memory)?,
                name,
                warp_instructions: None,
                ops: Default::default(),
            })
        }
        Class::Memcpy => {
            let name = f.string_opt("name", ev.name)?.unwrap_or_default();
            Work::Memcpy {
                bytes: bytes()?,
                direction: direction_from_name(&name),
            }
        }
        _ => Work::Memset { bytes: bytes()? },
    })
}

/// The stream of a work event: `args.stream`, else its `tid` (`7` or `"stream 7"`), else 0.
fn stream_of(f: &Fault<'_>, ev: &Event<'_>, args: &Args<'_>) -> Result<u32, ImportError> {
    let out_of_range = |field: &'static str, v: i128| {
        f.err(
            field,
            &v.to_string(),
            "not a CUDA stream id (0 to 4294967295, or -1)",
        )
    };
    Ok(match f.int_opt("args.stream", args.stream)? {
        Some(s) => stream_from(s).ok_or_else(|| out_of_range("args.stream", s))?,
        None => match ev.tid.map(stream_from_tid) {
            Some(Ok(s)) => s.unwrap_or(0),
            Some(Err(v)) => return Err(out_of_range("tid", v)),
            None => 0,
        },
    })
}
